package filesource

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/servicemap/sinktest"
)

func nodePortService(name, ip string, nodePort int32) *v1.Service {
	svc := service("default", name, ip, 80)
	svc.Spec.Type = v1.ServiceTypeNodePort
	svc.Spec.Ports[0].NodePort = nodePort
	return svc
}

// TestLastGoodSteps drives a directory through an editor's and a tenant's
// faults: empty files, lost document boundaries, and claims on one cluster
// IP or node port by two services. After each step the sink must hold
// exactly what the errors say is in force. Steps depend on the ones before.
func TestLastGoodSteps(t *testing.T) {
	web := service("default", "web", "198.18.0.10", 80)
	webSlice := endpointSlice("default", "web-1", "web", "198.19.1.1")
	api := service("default", "api", "198.18.0.40", 443)
	dns := service("default", "dns", "198.18.0.53", 53)
	all := []string{
		"EndpointSlice default/web-1 198.19.1.1",
		"Service default/api 198.18.0.40:443", "Service default/dns 198.18.0.53:53", "Service default/web 198.18.0.10:80",
	}
	const emptyErr = "a.yaml: is empty, as a save in progress leaves it; its last good version stays in force (a file holding only a comment removes every object on purpose)"

	steps := []struct {
		name      string
		change    func(t *testing.T, dir string)
		wantState []string
		wantErrs  []string
		wantHeld  float64 // kproxy_services_file_held_files
	}{{
		name: "initial load",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "a.yaml", yamlDocs(t, web, webSlice, api))
			writeFile(t, dir, "b.yaml", yamlDocs(t, dns))
		},
		wantState: all,
	}, {
		name:      "a truncated file keeps its last good version",
		change:    func(t *testing.T, dir string) { writeFile(t, dir, "a.yaml", "") },
		wantState: all,
		wantErrs:  []string{emptyErr},
		wantHeld:  1,
	}, {
		name:      "so does one holding only whitespace",
		change:    func(t *testing.T, dir string) { writeFile(t, dir, "a.yaml", "\n  \n\t\n") },
		wantState: all,
		wantErrs:  []string{emptyErr},
		wantHeld:  1,
	}, {
		name: "lost separators merge the documents: nothing of the file is dropped",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "a.yaml", strings.ReplaceAll(yamlDocs(t, web, webSlice, api), "---\n", ""))
		},
		wantState: all,
		wantErrs: []string{`a.yaml: document 1 at line 1 (Service default/api): line 15: key "apiVersion" already set in map ` +
			`line 20: key "kind" already set in map line 22: key "metadata" already set in map line 29: key "apiVersion" already set in map ` +
			`line 30: key "kind" already set in map line 32: key "metadata" already set in map line 35: key "spec" already set in map ` +
			`line 41: key "status" already set in map`},
		wantHeld: 1,
	}, {
		name: "a syntax error in the first document: the valid ones apply, nothing of the file is deleted",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "a.yaml", "apiVersion: v1\nkind: Service\nmetadata: {name: web\n---\n"+
				yamlDocs(t, endpointSlice("default", "web-1", "web", "198.19.1.2")))
		},
		wantState: []string{
			"EndpointSlice default/web-1 198.19.1.2",
			"Service default/api 198.18.0.40:443", "Service default/dns 198.18.0.53:53", "Service default/web 198.18.0.10:80",
		},
		wantErrs: []string{"a.yaml: document 1 at line 1: invalid YAML: line 3: did not find expected ',' or '}'"},
		wantHeld: 1,
	}, {
		name:      "once it parses, exactly its content applies",
		change:    func(t *testing.T, dir string) { writeFile(t, dir, "a.yaml", yamlDocs(t, web)) },
		wantState: []string{"Service default/dns 198.18.0.53:53", "Service default/web 198.18.0.10:80"},
	}, {
		name:      "a file holding only a comment empties it on purpose",
		change:    func(t *testing.T, dir string) { writeFile(t, dir, "b.yaml", "# nothing here\n") },
		wantState: []string{"Service default/web 198.18.0.10:80"},
	}, {
		name: "a new service taking an allocated cluster IP is rejected, even earlier in file order",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "0.yaml", yamlDocs(t, service("default", "thief", "198.18.0.10", 22)))
		},
		wantState: []string{"Service default/web 198.18.0.10:80"},
		wantErrs: []string{"0.yaml: document 1 at line 1 (Service default/thief): spec.clusterIPs[0]: " +
			"cluster IP 198.18.0.10 is already allocated to Service default/web (a.yaml document 1)"},
	}, {
		name: "of two new services with one cluster IP, the first in file order gets it",
		change: func(t *testing.T, dir string) {
			removeFile(t, dir, "0.yaml")
			writeFile(t, dir, "c.yaml", yamlDocs(t, service("default", "one", "198.18.0.20", 80), service("default", "two", "198.18.0.20", 81)))
		},
		wantState: []string{"Service default/one 198.18.0.20:80", "Service default/web 198.18.0.10:80"},
		wantErrs: []string{"c.yaml: document 2 at line 15 (Service default/two): spec.clusterIPs[0]: " +
			"cluster IP 198.18.0.20 is already allocated to Service default/one (c.yaml document 1)"},
	}, {
		name: "two services may swap cluster IPs in one save",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "c.yaml", yamlDocs(t, service("default", "one", "198.18.0.10", 80)))
			writeFile(t, dir, "a.yaml", yamlDocs(t, service("default", "web", "198.18.0.20", 80)))
		},
		wantState: []string{"Service default/one 198.18.0.10:80", "Service default/web 198.18.0.20:80"},
	}, {
		name: "a service moving onto an allocated cluster IP keeps its last good version",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "a.yaml", yamlDocs(t, service("default", "web", "198.18.0.10", 80)))
		},
		wantState: []string{"Service default/one 198.18.0.10:80", "Service default/web 198.18.0.20:80"},
		wantErrs: []string{"a.yaml: document 1 at line 1 (Service default/web): spec.clusterIPs[0]: " +
			"cluster IP 198.18.0.10 is already allocated to Service default/one (c.yaml document 1)"},
	}, {
		name: "the last good version kept keeps its claim against a newcomer",
		change: func(t *testing.T, dir string) {
			// web is still rejected and keeps 198.18.0.20; new takes it
			// first in file order, but loses it to web's last good version.
			writeFile(t, dir, "0.yaml", yamlDocs(t, service("default", "new", "198.18.0.20", 80)))
		},
		wantState: []string{"Service default/one 198.18.0.10:80", "Service default/web 198.18.0.20:80"},
		wantErrs: []string{
			"0.yaml: document 1 at line 1 (Service default/new): spec.clusterIPs[0]: " +
				"cluster IP 198.18.0.20 is already allocated to Service default/web (a.yaml document 1)",
			"a.yaml: document 1 at line 1 (Service default/web): spec.clusterIPs[0]: " +
				"cluster IP 198.18.0.10 is already allocated to Service default/one (c.yaml document 1)",
		},
	}, {
		name: "a node port is allocated to one service, whatever the protocol",
		change: func(t *testing.T, dir string) {
			removeFile(t, dir, "0.yaml")
			writeFile(t, dir, "a.yaml", yamlDocs(t, nodePortService("web", "198.18.0.20", 30080)))
			udp := nodePortService("udp", "198.18.0.30", 30080)
			udp.Spec.Ports[0].Protocol = v1.ProtocolUDP
			writeFile(t, dir, "d.yaml", yamlDocs(t, udp))
		},
		wantState: []string{"Service default/one 198.18.0.10:80", "Service default/web 198.18.0.20:80"},
		wantErrs: []string{"d.yaml: document 1 at line 1 (Service default/udp): spec.ports[0].nodePort: " +
			"node port 30080 is already allocated to Service default/web (a.yaml document 1)"},
	}, {
		name: "a health-check node port is allocated with the node ports",
		change: func(t *testing.T, dir string) {
			lb := nodePortService("lb", "198.18.0.30", 30081)
			lb.Spec.Type = v1.ServiceTypeLoadBalancer
			lb.Spec.ExternalTrafficPolicy = v1.ServiceExternalTrafficPolicyLocal
			lb.Spec.HealthCheckNodePort = 30080
			writeFile(t, dir, "d.yaml", yamlDocs(t, lb))
		},
		wantState: []string{"Service default/one 198.18.0.10:80", "Service default/web 198.18.0.20:80"},
		wantErrs: []string{"d.yaml: document 1 at line 1 (Service default/lb): spec.healthCheckNodePort: " +
			"node port 30080 is already allocated to Service default/web (a.yaml document 1)"},
	}, {
		name: "once freed, the node port goes to the other service",
		change: func(t *testing.T, dir string) {
			writeFile(t, dir, "a.yaml", yamlDocs(t, nodePortService("web", "198.18.0.20", 30082)))
		},
		wantState: []string{"Service default/lb 198.18.0.30:80", "Service default/one 198.18.0.10:80", "Service default/web 198.18.0.20:80"},
	}}

	dir := t.TempDir()
	sink := sinktest.New()
	src, err := New(dir, "n", sink, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var wantRejectedFiles float64
	for i, st := range steps {
		st.change(t, dir)
		src.reload(klog.Background())
		if diff := cmp.Diff(st.wantState, contents(sink)); diff != "" {
			t.Errorf("step %d %q: sink contents (-want +got):\n%s", i, st.name, diff)
		}
		var gotErrs []string
		for _, err := range src.Errors() {
			gotErrs = append(gotErrs, err.Error())
		}
		if diff := cmp.Diff(st.wantErrs, gotErrs); diff != "" {
			t.Errorf("step %d %q: errors (-want +got):\n%s", i, st.name, diff)
		}
		wantRejectedFiles += st.wantHeld
		if got := testutil.ToFloat64(src.metrics.heldFiles); got != st.wantHeld {
			t.Errorf("step %d %q: held files %v, want %v", i, st.name, got, st.wantHeld)
		}
		if got := testutil.ToFloat64(src.metrics.rejectedFiles); got != wantRejectedFiles {
			t.Errorf("step %d %q: rejected files total %v, want %v", i, st.name, got, wantRejectedFiles)
		}
	}
}
