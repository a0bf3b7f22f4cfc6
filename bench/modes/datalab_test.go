package modes

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	"sigs.k8s.io/yaml"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/modes/load"
	"kproxy.dev/kproxy/bench/syncscale"
)

func TestServicesYAML(t *testing.T) {
	node := netip.MustParseAddr("198.19.0.1")
	tests := []struct {
		name      string
		padding   int
		endpoints []netip.Addr
		want      string
	}{
		{
			name:      "the measured service alone",
			endpoints: []netip.Addr{EndpointAddr(0), EndpointAddr(1)},
			want: `apiVersion: v1
kind: Node
metadata: {name: node, labels: {kubernetes.io/hostname: node}}
status: {addresses: [{type: InternalIP, address: 198.19.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: bench, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 198.18.254.1
  ports:
  - {name: http, port: 80, protocol: TCP, targetPort: 8080}
  - {name: udp, port: 5300, protocol: UDP, targetPort: 9001}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: bench-1, namespace: default, labels: {kubernetes.io/service-name: bench}}
addressType: IPv4
ports:
- {name: http, port: 8080, protocol: TCP}
- {name: udp, port: 9001, protocol: UDP}
endpoints:
- {addresses: [198.19.1.101], conditions: {ready: true}}
- {addresses: [198.19.1.102], conditions: {ready: true}}
`,
		},
		{
			name:      "one bulk service first, no endpoints",
			padding:   1,
			endpoints: nil,
			want: `apiVersion: v1
kind: Node
metadata: {name: node, labels: {kubernetes.io/hostname: node}}
status: {addresses: [{type: InternalIP, address: 198.19.0.1}]}
---
apiVersion: v1
kind: Service
metadata: {name: svc-00000, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 198.18.1.0
  ports:
  - {name: http, port: 80, protocol: TCP, targetPort: 8080}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc-00000-1, namespace: default, labels: {kubernetes.io/service-name: svc-00000}}
addressType: IPv4
ports:
- {name: http, port: 8080, protocol: TCP}
endpoints:
- {addresses: [198.19.2.1], conditions: {ready: true}}
- {addresses: [198.19.2.2], conditions: {ready: true}}
- {addresses: [198.19.2.3], conditions: {ready: true}}
- {addresses: [198.19.2.4], conditions: {ready: true}}
- {addresses: [198.19.2.5], conditions: {ready: true}}
- {addresses: [198.19.2.6], conditions: {ready: true}}
- {addresses: [198.19.2.7], conditions: {ready: true}}
- {addresses: [198.19.2.8], conditions: {ready: true}}
- {addresses: [198.19.2.9], conditions: {ready: true}}
- {addresses: [198.19.2.10], conditions: {ready: true}}
---
apiVersion: v1
kind: Service
metadata: {name: bench, namespace: default}
spec:
  type: ClusterIP
  clusterIP: 198.18.254.1
  ports:
  - {name: http, port: 80, protocol: TCP, targetPort: 8080}
  - {name: udp, port: 5300, protocol: UDP, targetPort: 9001}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: bench-1, namespace: default, labels: {kubernetes.io/service-name: bench}}
addressType: IPv4
ports:
- {name: http, port: 8080, protocol: TCP}
- {name: udp, port: 9001, protocol: UDP}
endpoints: []
`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ServicesYAML("node", node, tt.padding, tt.endpoints)
			if got != tt.want {
				t.Errorf("ServicesYAML: got\n%s\nwant\n%s\ndiff (-want +got):\n%s", got, tt.want, cmp.Diff(tt.want, got))
			}
		})
	}
}

// TestServicesYAMLDecodesToTheObjects checks that the file says what the
// API objects the host benchmark creates say, field for field: the YAML
// is written by hand, so a field BulkService or BenchService gains would
// otherwise be dropped silently.
func TestServicesYAMLDecodesToTheObjects(t *testing.T) {
	tests := []struct {
		padding, endpoints int
	}{{0, 1}, {3, 10}, {2, 0}}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%d+%d", tt.padding, tt.endpoints), func(t *testing.T) {
			var eps []netip.Addr
			for i := range tt.endpoints {
				eps = append(eps, EndpointAddr(i))
			}
			var want []any
			for i := range tt.padding {
				svc, slice := syncscale.BulkService(i)
				want = append(want, svc, slice)
			}
			svc, slice := BenchService(eps)
			want = append(want, svc, slice)

			docs := strings.Split(ServicesYAML("n1", netip.MustParseAddr("198.19.0.1"), tt.padding, eps), "\n---\n")
			var node v1.Node
			if err := yaml.UnmarshalStrict([]byte(docs[0]), &node); err != nil {
				t.Fatalf("decoding the Node: %v\n%s", err, docs[0])
			}
			if node.Name != "n1" || len(node.Status.Addresses) != 1 || node.Status.Addresses[0].Address != "198.19.0.1" {
				t.Errorf("Node: got %+v", node)
			}
			if len(docs)-1 != len(want) {
				t.Fatalf("got %d service and slice documents, want %d", len(docs)-1, len(want))
			}
			for i, doc := range docs[1:] {
				var got any
				switch want[i].(type) {
				case *v1.Service:
					var s v1.Service
					if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
						t.Fatalf("decoding document %d: %v\n%s", i+1, err, doc)
					}
					s.TypeMeta = want[i].(*v1.Service).TypeMeta
					got = &s
				case *discovery.EndpointSlice:
					var s discovery.EndpointSlice
					if err := yaml.UnmarshalStrict([]byte(doc), &s); err != nil {
						t.Fatalf("decoding document %d: %v\n%s", i+1, err, doc)
					}
					s.TypeMeta = want[i].(*discovery.EndpointSlice).TypeMeta
					if len(s.Endpoints) == 0 {
						s.Endpoints = want[i].(*discovery.EndpointSlice).Endpoints // [] and nil alike
					}
					got = &s
				}
				if diff := cmp.Diff(want[i], got); diff != "" {
					t.Errorf("document %d differs from the object (-object +file):\n%s", i+1, diff)
				}
			}
		})
	}
}

func TestBenchService(t *testing.T) {
	tests := []struct {
		endpoints []netip.Addr
	}{{nil}, {[]netip.Addr{EndpointAddr(0)}}, {[]netip.Addr{EndpointAddr(0), EndpointAddr(1), EndpointAddr(2)}}}
	for _, tt := range tests {
		t.Run(fmt.Sprint(len(tt.endpoints)), func(t *testing.T) {
			svc, slice := BenchService(tt.endpoints)
			if svc.Spec.ClusterIP != "198.18.254.1" || svc.Namespace != "default" || slice.Name != "bench-1" ||
				slice.Labels[discovery.LabelServiceName] != svc.Name {
				t.Errorf("service %s/%s %s, slice %s labelled %v", svc.Namespace, svc.Name, svc.Spec.ClusterIP, slice.Name, slice.Labels)
			}
			var ports []string
			for _, p := range svc.Spec.Ports {
				ports = append(ports, fmt.Sprintf("%s %s %d->%s", p.Name, p.Protocol, p.Port, p.TargetPort.String()))
			}
			for _, p := range slice.Ports {
				ports = append(ports, fmt.Sprintf("%s %s %d", *p.Name, *p.Protocol, *p.Port))
			}
			if got, want := strings.Join(ports, ", "), "http TCP 80->8080, udp UDP 5300->9001, http TCP 8080, udp UDP 9001"; got != want {
				t.Errorf("ports: got %s, want %s", got, want)
			}
			var addrs []string
			for _, ep := range slice.Endpoints {
				if ep.Conditions.Ready == nil || !*ep.Conditions.Ready {
					t.Errorf("endpoint %v is not ready", ep.Addresses)
				}
				addrs = append(addrs, ep.Addresses...)
			}
			var want []string
			for _, a := range tt.endpoints {
				want = append(want, a.String())
			}
			if diff := cmp.Diff(want, addrs); diff != "" {
				t.Errorf("endpoint addresses (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSummarizeRuns(t *testing.T) {
	runs := []load.Result{
		{Rate: 100, P50: 2 * time.Millisecond, P99: 9 * time.Millisecond, Ops: 100, Errors: 1, BusyCPU: 10 * time.Millisecond, Elapsed: time.Second},
		{Rate: 300, P50: 1 * time.Millisecond, P99: 5 * time.Millisecond, Ops: 300, Errors: 0, BusyCPU: 60 * time.Millisecond, Elapsed: time.Second},
		{Rate: 200, P50: 3 * time.Millisecond, P99: 7 * time.Millisecond, Ops: 200, Errors: 2, BusyCPU: 30 * time.Millisecond, Elapsed: time.Second},
	}
	got := summarizeRuns(runs)
	var cpu []float64
	for _, r := range runs {
		cpu = append(cpu, float64(r.CPUPerOp())/float64(time.Microsecond))
	}
	want := Workload{Rate: 200, P50: 2, P99: 7, CPUPerOp: benchtable.Median(cpu), Rates: []float64{100, 300, 200}, Lost: 3}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("summarize (-want +got):\n%s", diff)
	}
	if want.CPUPerOp <= 0 {
		t.Errorf("CPU per op %v, want > 0 (load.Result.CPUPerOp: busy CPU over ops)", want.CPUPerOp)
	}
}

// TestDataLab measures the DNAT reference through a data lab, then checks
// that every endpoint answers, that backend-2 is left free, that alive's
// error ends a measurement, and that a VIP nothing serves fails promptly
// instead of measuring timeouts.
func TestDataLab(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	d := NewDataLab(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	t.Run("DNAT", func(t *testing.T) {
		remove, err := d.InstallDNAT(BenchVIP)
		if err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := remove(); err != nil {
				t.Error(err)
			}
		}()
		data, err := d.MeasureData(ctx, BenchVIP, time.Second, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range Workloads() {
			got, ok := data[w]
			if !ok || got.Rate <= 0 || len(got.Rates) != 1 || got.CPUPerOp <= 0 {
				t.Errorf("%s: got %+v (present %t), want a positive rate and CPU per op from one run", w, got, ok)
			}
		}
		if len(data) != len(Workloads()) {
			t.Errorf("got workloads %v, want %v", workloadIDs(data), Workloads())
		}
		t.Logf("DNAT, 1 s each: %+v", data)

		// What a failed workload's error says about the node.
		state := d.dataPlaneState(ctx, BenchVIP)
		t.Logf("the data plane's state:\n%s", state)
		for _, want := range []string{"node: conntrack=", "IPVS connections", "conntrack TCP entries to " + BenchVIP.String() + ": ",
			"client (", "TCP counters: ", "fresh connections from the client now: 4 of 4 opened"} {
			if !strings.Contains(state, want) {
				t.Errorf("the data plane's state lacks %q:\n%s", want, state)
			}
		}

		died := errors.New("the proxy died")
		_, err = d.MeasureData(ctx, BenchVIP, 200*time.Millisecond, 2, func() error { return died })
		if !errors.Is(err, died) {
			t.Errorf("MeasureData with a dead proxy: got %v, want %v", err, died)
		}
	})

	t.Run("EveryEndpointAnswers", func(t *testing.T) {
		for _, ep := range d.Endpoints {
			body, err := lab.HTTPGet(d.Topo.Client, "http://"+netip.AddrPortFrom(ep, lab.NginxPort).String()+"/")
			if err != nil || body != d.Servers.Name {
				t.Errorf("HTTP to %s: %q, %v; want %q", ep, body, err, d.Servers.Name)
			}
			got, err := lab.UDPAsk(d.Topo.Client, netip.AddrPortFrom(ep, lab.UDPPlainEchoPort).String(), "ping")
			if err != nil || got != "ping" {
				t.Errorf("UDP echo on %s: %q, %v", ep, got, err)
			}
		}
		if err := d.Spare.WaitListening("tcp", lab.NginxPort, 0, nil); err == nil {
			t.Errorf("something listens on %s port %d; it should be free", d.Spare, lab.NginxPort)
		}
	})

	t.Run("NothingInstalled", func(t *testing.T) {
		start := time.Now()
		_, err := d.MeasureData(ctx, BenchVIP, time.Second, 1, nil)
		if err == nil || !strings.Contains(err.Error(), BenchVIP.String()) {
			t.Fatalf("MeasureData through a VIP nothing serves: got %v, want an error naming %s", err, BenchVIP)
		}
		// The check's own timeouts (3 s HTTP) bound it; a workload run
		// would have taken its second and reported rates of timeouts.
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("MeasureData took %v to fail", took)
		}
		t.Logf("failed after %v: %v", time.Since(start).Round(time.Millisecond), err)
		if state := d.dataPlaneState(ctx, BenchVIP); !strings.Contains(state, "fresh connections from the client now: 0 of 4 opened") {
			t.Errorf("the data plane's state through a VIP nothing serves:\n%s", state)
		}
	})
}

func workloadIDs[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestRunAnsweredRetriesRunsThatAnsweredNothing(t *testing.T) {
	nothing := fmt.Errorf("keepalive to %s: %w", BenchVIP, load.ErrNothingAnswered)
	refused := errors.New("wrk: connection refused")
	const d = 300 * time.Millisecond
	for _, tc := range []struct {
		name    string
		results []error // what each run returns, in turn
		want    []time.Duration
		wantErr error
	}{
		{name: "answered at once", results: []error{nil}, want: []time.Duration{d}},
		{name: "answered on the second run", results: []error{nothing, nil}, want: []time.Duration{d, 2 * d}},
		{name: "answered on the last run", results: []error{nothing, nothing, nil}, want: []time.Duration{d, 2 * d, 4 * d}},
		{name: "never answered", results: []error{nothing, nothing, nothing, nil},
			want: []time.Duration{d, 2 * d, 4 * d}, wantErr: load.ErrNothingAnswered},
		{name: "other errors are not run again", results: []error{refused, nil}, want: []time.Duration{d}, wantErr: refused},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []time.Duration
			r, err := runAnswered(context.Background(), d, func(runFor time.Duration) (load.Result, error) {
				err := tc.results[len(got)]
				got = append(got, runFor)
				if err != nil {
					return load.Result{}, err
				}
				return load.Result{Ops: 1, Elapsed: runFor}, nil
			})
			if !slices.Equal(got, tc.want) {
				t.Errorf("runs of %v, want %v", got, tc.want)
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Errorf("error %v, want %v", err, tc.wantErr)
			}
			if err == nil && r.Elapsed != tc.want[len(tc.want)-1] {
				t.Errorf("result of the run of %v, want the last run's (%v)", r.Elapsed, tc.want[len(tc.want)-1])
			}
		})
	}

	t.Run("a context that ended stops the retries", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		runs := 0
		_, err := runAnswered(ctx, d, func(time.Duration) (load.Result, error) { runs++; return load.Result{}, nothing })
		if runs != 1 || !errors.Is(err, load.ErrNothingAnswered) {
			t.Errorf("%d runs, error %v; want 1 run and its error", runs, err)
		}
	})
}
