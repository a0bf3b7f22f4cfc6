package serviceview

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/servicemap"
)

// sample has one port of each shape the page words differently.
func sample() *servicemap.Snapshot {
	return testkit.Snapshot(
		testkit.Port("demo", "web", 80, "198.18.0.10", testkit.NodePort(30080), testkit.ExternalIPs("198.18.0.11"),
			testkit.LoadBalancerIPs("198.18.0.12"), testkit.SourceRanges("198.19.0.0/16"), testkit.ExternalLocal(31000),
			testkit.Endpoints(
				testkit.EP("198.19.1.11:8080", testkit.Local, testkit.ZoneHints(testkit.Zone)),
				testkit.EP("198.19.1.12:8080", testkit.Terminating),
				testkit.EP("198.19.1.13:8080", testkit.Gone))),
		testkit.Port("demo", "sticky", 80, "198.18.0.20,fd00:18::20", testkit.Affinity(3*time.Hour), testkit.InternalLocal()),
		testkit.Port("other", "dns", 53, "198.18.0.53", testkit.Protocol(v1.ProtocolUDP), testkit.Named(""),
			testkit.Endpoints(testkit.EP("198.19.1.11:9000"))),
	)
}

// described stands in for a mode: something of every kind for demo/web,
// a note for the others.
type described struct{}

func (described) Programmed() func(servicemap.ServicePortName) mode.Programmed {
	return func(n servicemap.ServicePortName) mode.Programmed {
		if n.Name != "web" {
			return mode.Programmed{Note: "nothing programmed"}
		}
		return mode.Programmed{
			Chains: []mode.Chain{{Family: ipfamily.IPv4, Table: "nat", Name: "KUBE-SVC-X"}, {Family: ipfamily.IPv4, Table: "nat", Name: "KUBE-SEP-Y"}},
			VirtualServers: []mode.VirtualServer{{Family: ipfamily.IPv4, Address: "TCP/198.18.0.10:80", Scheduler: "rr",
				RealServers: []mode.RealServer{{Address: "198.19.1.11:8080", Weight: 1}, {Address: "198.19.1.12:8080"}}}},
			Relays: []mode.Relay{{Family: ipfamily.IPv4, Class: "internal", Portal: "redirect", ProxyPort: 40001},
				{Family: ipfamily.IPv4, Class: "external", Portal: "local", Listen: []string{"198.19.0.1:30080"}}},
			Counters: &mode.RelayCounters{Connections: 3, Active: 1, DialFailures: 2, BytesToEndpoint: 10, BytesToClient: 20,
				Refused: map[string]uint64{"no_endpoints": 4, "dial_failed": 1}},
		}
	}
}

func TestTextGolden(t *testing.T) {
	var b bytes.Buffer
	if err := WriteText(&b, Build(mode.IPTables, testkit.NodeName, sample(), described{}.Programmed(), Filter{})); err != nil {
		t.Fatal(err)
	}
	testkit.Golden(t, "testdata/sample.golden", b.String())
}

func TestJSONGolden(t *testing.T) {
	out, err := json.MarshalIndent(Build(mode.IPTables, testkit.NodeName, sample(), described{}.Programmed(), Filter{}), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	testkit.Golden(t, "testdata/sample.json.golden", string(out)+"\n")
}

func TestBuild(t *testing.T) {
	for _, tc := range []struct {
		name   string
		snap   *servicemap.Snapshot
		filter Filter
		want   []string // ns/name:port of the ports shown
	}{
		{"no snapshot yet", nil, Filter{}, nil},
		{"every port", sample(), Filter{}, []string{"demo/sticky:http", "demo/web:http", "other/dns:"}},
		{"a namespace", sample(), ParseFilter("demo"), []string{"demo/sticky:http", "demo/web:http"}},
		{"a service", sample(), ParseFilter("demo/web"), []string{"demo/web:http"}},
		{"nothing matches", sample(), ParseFilter("demo/none"), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Build(mode.NFTables, "n", tc.snap, nil, tc.filter)
			var got []string
			for _, sp := range p.ServicePorts {
				got = append(got, sp.Namespace+"/"+sp.Name+":"+sp.PortName)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("ports %v, want %v", got, tc.want)
			}
			if p.ServicePorts == nil {
				t.Error("servicePorts is null; an empty page must still list []")
			}
		})
	}
}

func TestConvert(t *testing.T) {
	p := Build(mode.IPTables, "n", sample(), nil, ParseFilter("demo"))
	web, sticky := p.ServicePorts[1], p.ServicePorts[0]
	for _, c := range []struct{ what, got, want string }{
		{"web external policy", web.ExternalTrafficPolicy, "Local"},
		{"web internal policy", web.InternalTrafficPolicy, "Cluster"},
		{"web affinity", web.SessionAffinity, "None"},
		{"web source ranges", fmt.Sprint(web.LoadBalancerSourceRanges), "[198.19.0.0/16]"},
		{"web endpoint 2", fmt.Sprintf("%+v", web.Endpoints[1]), "{Address:198.19.1.12:8080 Ready:false Serving:true Terminating:true Local:false Node:node-b Zone: ZoneHints:[] NodeHints:[]}"},
		{"web endpoint 1 local", fmt.Sprint(web.Endpoints[0].Local, web.Endpoints[0].ZoneHints), "true [zone-a]"},
		{"sticky affinity", fmt.Sprintf("%s %d", sticky.SessionAffinity, sticky.AffinityTimeoutSeconds), "ClientIP 10800"},
		{"sticky policy", sticky.InternalTrafficPolicy + "/" + sticky.ExternalTrafficPolicy, "Local/"},
		{"sticky cluster IPs", fmt.Sprint(sticky.ClusterIPs), "[198.18.0.20 fd00:18::20]"},
	} {
		if c.got != c.want {
			t.Errorf("%s: %q, want %q", c.what, c.got, c.want)
		}
	}
}

func TestHandler(t *testing.T) {
	var h Handler
	get := func(url string) (int, string, string) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, url, nil))
		return rec.Code, rec.Header().Get("Content-Type"), rec.Body.String()
	}
	if code, _, body := get("/services"); code != http.StatusServiceUnavailable {
		t.Errorf("before Attach: %d %q, want 503", code, body)
	}
	h.Attach(Source{Mode: mode.Userspace, Node: "n", InForce: sample, Programmed: described{}})
	for _, tc := range []struct {
		url      string
		code     int
		ctype    string
		contains string
	}{
		{"/services", 200, "application/json", `"proxyPort": 40001`},
		{"/services?format=json&service=other", 200, "application/json", `"name": "dns"`},
		{"/services?format=text", 200, "text/plain; charset=utf-8", "proxy port 40001"},
		{"/services?format=text&service=demo/sticky", 200, "text/plain; charset=utf-8", "1 service port(s)"},
		{"/services?format=yaml", 400, "text/plain; charset=utf-8", "format must be json or text"},
	} {
		code, ctype, body := get(tc.url)
		if code != tc.code || ctype != tc.ctype || !strings.Contains(body, tc.contains) {
			t.Errorf("GET %s: %d %s, want %d %s containing %q:\n%s", tc.url, code, ctype, tc.code, tc.ctype, tc.contains, body)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/services", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d, want 405", rec.Code)
	}
}

// bigSnapshot is n service ports of three endpoints each.
func bigSnapshot(n int) *servicemap.Snapshot {
	ports := make([]*servicemap.ServicePort, n)
	for i := range ports {
		ip := fmt.Sprintf("198.18.%d.%d", i/250, i%250+1)
		ports[i] = testkit.Port("ns", fmt.Sprintf("svc-%05d", i), 80, ip, testkit.ThreeEndpoints())
	}
	return testkit.Snapshot(ports...)
}

// lockedReader is a mode reader that, as the kernel modes' do, takes a
// read lock shared with the sync for each port it is asked about.
type lockedReader struct{ mu *sync.RWMutex }

func (l lockedReader) Programmed() func(servicemap.ServicePortName) mode.Programmed {
	return func(n servicemap.ServicePortName) mode.Programmed {
		l.mu.RLock()
		defer l.mu.RUnlock()
		return mode.Programmed{Chains: []mode.Chain{{Family: ipfamily.IPv4, Table: "nat", Name: "KUBE-SVC-" + n.Name}}}
	}
}

// BenchmarkPage30000 builds and encodes the whole page at 30,000 service
// ports, as JSON and as text; "lock-wait-max-ns" is the longest a writer
// holding the per-port lock of the mode waited while pages were built.
func BenchmarkPage30000(b *testing.B) {
	snap := bigSnapshot(30000)
	for _, format := range []string{"json", "text"} {
		b.Run(format, func(b *testing.B) {
			var mu sync.RWMutex
			var h Handler
			h.Attach(Source{Mode: mode.IPTables, Node: "n", InForce: func() *servicemap.Snapshot { return snap }, Programmed: lockedReader{&mu}})
			stop := make(chan struct{})
			maxWait := make(chan time.Duration)
			go func() {
				var worst time.Duration
				for {
					select {
					case <-stop:
						maxWait <- worst
						return
					default:
					}
					start := time.Now()
					mu.Lock()
					if w := time.Since(start); w > worst {
						worst = w
					}
					mu.Unlock()
					time.Sleep(100 * time.Microsecond)
				}
			}()
			b.ReportAllocs()
			for b.Loop() {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/services?format="+format, nil))
				if rec.Code != 200 {
					b.Fatal(rec.Code)
				}
				b.SetBytes(int64(rec.Body.Len()))
			}
			close(stop)
			b.ReportMetric(float64((<-maxWait).Nanoseconds()), "lock-wait-max-ns")
		})
	}
}
