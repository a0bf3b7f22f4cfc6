package app

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/spf13/pflag"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/cmd/kproxy/options"
)

// The tests run inside fresh network namespaces, so kube-proxy's default
// ports (10256 healthz, 10249 metrics) are free and nothing on the host is
// touched.
const (
	healthzURL = "http://127.0.0.1:10256"
	metricsURL = "http://127.0.0.1:10249"
)

const twoServices = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 198.18.0.10
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints:
- addresses: [198.19.1.11]
  nodeName: node-a
- addresses: [198.19.2.12]
  nodeName: node-b
---
apiVersion: v1
kind: Service
metadata: {name: dns, namespace: kube-system}
spec:
  clusterIP: 198.18.0.53
  ports: [{name: dns, port: 53, protocol: UDP}]
`

const thirdService = `---
apiVersion: v1
kind: Service
metadata: {name: api, namespace: shop}
spec:
  clusterIP: 198.18.0.40
  ports: [{name: https, port: 443}]
`

func config(t *testing.T, args ...string) *options.Config {
	t.Helper()
	o := options.NewOptions()
	fs := pflag.NewFlagSet("kproxy", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(append([]string{"--hostname-override=node-a"}, args...)); err != nil {
		t.Fatalf("parsing flags %v: %v", args, err)
	}
	cfg, err := o.Complete(fs)
	if err != nil {
		t.Fatalf("completing flags %v: %v", args, err)
	}
	return cfg
}

// logBuffer collects structured log lines from the context logger.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) logger() logr.Logger {
	return funcr.New(func(prefix, args string) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.buf.WriteString(prefix + " " + args + "\n")
	}, funcr.Options{Verbosity: 4})
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// iptablesSave dumps this namespace's IPv4 tables.
func iptablesSave(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("iptables-save").CombinedOutput()
	if err != nil {
		t.Fatalf("iptables-save: %v\n%s", err, out)
	}
	return string(out)
}

func TestRunFromServicesFile(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	dir := t.TempDir()
	manifest := filepath.Join(dir, "services.yaml")
	if err := os.WriteFile(manifest, []byte(twoServices), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := config(t, "--services-file="+manifest, "--iptables-min-sync-period=0")

	logs := &logBuffer{}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logs.logger()))
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})

	lab.Eventually(t, "the first sync to show in /metrics", func() (bool, string) {
		v, ok := lab.Metric("kproxy_service_ports")
		return ok && v == "2", v
	})

	code, body := get(t, healthzURL+"/healthz")
	if code != http.StatusOK {
		t.Fatalf("/healthz = %d %s, want 200", code, body)
	}
	var status map[string]any
	if err := json.Unmarshal([]byte(body), &status); err != nil {
		t.Fatalf("/healthz body is not JSON: %v: %s", err, body)
	}
	for _, field := range []string{"lastUpdated", "currentTime"} {
		if _, ok := status[field]; !ok {
			t.Errorf("/healthz body lacks %q: %s", field, body)
		}
	}
	if code, body := get(t, metricsURL+"/proxyMode"); code != http.StatusOK || strings.TrimSpace(body) != "iptables" {
		t.Errorf("/proxyMode = %d %q, want 200 \"iptables\" (auto choice on this kernel)", code, body)
	}
	if code, body := get(t, healthzURL+"/livez"); code != http.StatusOK {
		t.Errorf("/livez = %d %s, want 200", code, body)
	}
	_, metricsBody := get(t, metricsURL+"/metrics")
	for _, want := range []string{
		"kproxy_endpoints 2",
		`kubeproxy_sync_proxy_rules_duration_seconds_count{ip_family="IPv4"} 1`,
		"kubeproxy_sync_proxy_rules_service_changes_total 2",
	} {
		if !strings.Contains(metricsBody, want+"\n") {
			t.Errorf("/metrics lacks %q", want)
		}
	}

	// The iptables mode programmed both services: a DNAT path for web, a
	// refusal for dns, which has no endpoints.
	rules := iptablesSave(t)
	for _, want := range []string{
		`-A KUBE-SERVICES -d 198.18.0.10/32 -p tcp -m comment --comment "shop/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-`,
		`-j DNAT --to-destination 198.19.1.11:8080`,
		`-j DNAT --to-destination 198.19.2.12:8080`,
		`-A KUBE-SERVICES -d 198.18.0.53/32 -p udp -m comment --comment "kube-system/dns:dns has no endpoints" -m udp --dport 53 -j REJECT`,
	} {
		if !strings.Contains(rules, want) {
			t.Errorf("iptables-save lacks %s\n%s", want, rules)
		}
	}

	// An edit reaches the map and the mode without a restart.
	f, err := os.OpenFile(manifest, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(thirdService); err != nil {
		t.Fatal(err)
	}
	f.Close()
	lab.Eventually(t, "the edited file to reach the map", func() (bool, string) {
		v, ok := lab.Metric("kproxy_service_ports")
		return ok && v == "3", v
	})
	if rules := iptablesSave(t); !strings.Contains(rules, `-d 198.18.0.40/32 -p tcp -m comment --comment "shop/api:https has no endpoints"`) {
		t.Errorf("the new service was not programmed:\n%s", rules)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v after cancellation, want nil (clean shutdown)", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10s of cancellation")
	}
	done <- nil // for the cleanup
	if _, err := net.DialTimeout("tcp", "127.0.0.1:10249", time.Second); err == nil {
		t.Error("the metrics port still accepts connections after shutdown")
	}
}

func TestRunRefusesModeTheKernelLacks(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	manifest := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(manifest, []byte(twoServices), 0o644); err != nil {
		t.Fatal(err)
	}
	before := lab.WithoutComments(lab.Run(t, "iptables-nft-save"))
	err := Run(context.Background(), config(t, "--services-file="+manifest, "--proxy-mode=ipvs"))
	if err == nil {
		t.Fatal("Run in ipvs mode succeeded on a kernel without IPVS")
	}
	for _, want := range []string{"--proxy-mode=ipvs", "IPVS is absent", "--proxy-mode=iptables"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if after := lab.WithoutComments(lab.Run(t, "iptables-nft-save")); after != before {
		t.Errorf("a refused start changed the nat/filter tables:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// TestRunFailsWhenMetricsPortIsTaken: with --bind-address-hard-fail a port
// in use fails the start (TestMetricsPortTakenWithoutHardFail: without it).
func TestRunFailsWhenMetricsPortIsTaken(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:10249")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	manifest := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(manifest, []byte(twoServices), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = Run(ctx, config(t, "--services-file="+manifest, "--bind-address-hard-fail"))
	if err == nil || !strings.Contains(err.Error(), "--metrics-bind-address") || !strings.Contains(err.Error(), "127.0.0.1:10249") {
		t.Fatalf("Run with the metrics port taken returned %v, want an error naming --metrics-bind-address and the address", err)
	}
	if code, _ := get(t, healthzURL+"/healthz"); code != 0 {
		t.Errorf("the healthz server was left running after a failed start (status %d)", code)
	}
}

func TestCleanupOnCleanNamespaceChangesNothing(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	saves := []string{"iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"}
	before := map[string]string{}
	for _, s := range saves {
		before[s] = lab.WithoutComments(lab.Run(t, s))
	}
	for round := 1; round <= 2; round++ {
		if err := Cleanup(context.Background(), config(t, "--cleanup")); err != nil {
			t.Fatalf("cleanup round %d on a clean namespace: %v", round, err)
		}
	}
	for _, s := range saves {
		if after := lab.WithoutComments(lab.Run(t, s)); after != before[s] {
			t.Errorf("%s changed after cleanup of a clean namespace:\nbefore:\n%s\nafter:\n%s", s, before[s], after)
		}
	}
}
