package modes

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/modes/load"
	"kproxy.dev/kproxy/bench/syncscale"
)

// The measured service: one ClusterIP with an HTTP and a UDP port, whose
// endpoints are DataLab.Endpoints (nginx and the plain UDP echo on
// backend-1). Every mode and the DNAT reference carry the data-plane
// workloads through it.
const (
	BenchServiceName = "bench"
	BenchSliceName   = "bench-1"
	BenchHTTPPort    = 80
	BenchUDPPort     = 5300
	benchHTTPName    = "http"
	benchUDPName     = "udp"
)

// BenchVIP is the measured service's ClusterIP (read-only). It lies
// outside syncscale's bulk range (198.18.1.0 upwards, up to 65,000
// services) and its network-programming range (198.18.255.x).
var BenchVIP = netip.MustParseAddr("198.18.254.1")

// Endpoint addresses: backend-1 gets them as extra addresses on its eth0,
// from 198.19.1.101 up to .254, all in the pod /24.
const (
	firstEndpointHost = 101
	maxEndpoints      = 254 - firstEndpointHost + 1
)

// DataLab is the data-plane lab every mode is measured in: the lab
// topology with two backends, the servers on backend-1 answering on
// Endpoints, and backend-2 left free.
type DataLab struct {
	Topo *lab.Topology
	// Servers is backend-1: nginx on lab.NginxPort (all addresses) and the
	// plain UDP echo on lab.UDPPlainEchoPort (one socket per endpoint).
	Servers *lab.Host
	// Spare is backend-2, with nothing running on it (the host benchmark
	// runs its answer server there on port 8080).
	Spare *lab.Host
	// Endpoints are the measured service's endpoints, all on Servers.
	Endpoints []netip.Addr
}

// EndpointAddr is the i-th endpoint address (i from 0).
func EndpointAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{198, 19, 1, byte(firstEndpointHost + i)})
}

// NewDataLab builds the data lab with endpoints endpoints (1..154) in this
// test's fresh network namespace (lab.InFreshNetns), which becomes the
// node; everything is removed when tb ends.
func NewDataLab(tb testing.TB, endpoints int) *DataLab {
	tb.Helper()
	if endpoints < 1 || endpoints > maxEndpoints {
		tb.Fatalf("NewDataLab: %d endpoints, want 1..%d", endpoints, maxEndpoints)
	}
	topo := lab.NewTopology(tb, lab.TopologyOptions{Backends: 2})
	d := &DataLab{Topo: topo, Servers: topo.Backends[0], Spare: topo.Backends[1]}
	for i := range endpoints {
		d.Endpoints = append(d.Endpoints, EndpointAddr(i))
	}
	if err := d.addEndpointAddrs(); err != nil {
		tb.Fatal(err)
	}
	// Not lab.StartServers: its UDP echo listens on the wildcard and would
	// answer from backend-1's primary address, not from the endpoint the
	// client's packet was DNATed to, and conntrack would not undo the NAT.
	nginx := lab.StartNginx(tb, d.Servers, tb.TempDir())
	for _, ep := range d.Endpoints {
		conn, err := d.Servers.ListenPacket("udp4", netip.AddrPortFrom(ep, lab.UDPPlainEchoPort).String())
		if err != nil {
			tb.Fatalf("UDP echo on %s: %v", ep, err)
		}
		tb.Cleanup(func() { conn.Close() })
		udp := conn.(*net.UDPConn)
		_ = udp.SetReadBuffer(4 << 20)
		_ = udp.SetWriteBuffer(4 << 20)
		for range 2 { // two readers, as lab.StartServers runs: the echo must not be the bottleneck
			go lab.ServeUDPEchoOn(udp, "")
		}
	}
	if err := nginx.WaitListening("tcp", lab.NginxPort, guest.Scale(10*time.Second)); err != nil {
		tb.Fatal(err)
	}
	if err := load.PrepareHosts(topo); err != nil {
		tb.Fatalf("preparing the lab hosts for the load generators: %v", err)
	}
	return d
}

// addEndpointAddrs puts the endpoint addresses on backend-1's eth0 in one
// `ip -batch` run (one process, which counts in the slow guest).
func (d *DataLab) addEndpointAddrs() error {
	var lines strings.Builder
	for _, ep := range d.Endpoints {
		fmt.Fprintf(&lines, "addr add %s/24 dev eth0\n", ep)
	}
	cmd := exec.Command("ip", "-n", d.Servers.Netns, "-batch", "-")
	cmd.Stdin = strings.NewReader(lines.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("adding the endpoint addresses to %s: %w\n%s", d.Servers, err, out)
	}
	return nil
}

// Target is where the workloads go for a service on vip.
func (d *DataLab) Target(vip netip.Addr) load.Target {
	return load.Target{
		Client: d.Topo.Client,
		HTTP:   netip.AddrPortFrom(vip, BenchHTTPPort),
		UDP:    netip.AddrPortFrom(vip, BenchUDPPort),
	}
}

// iptablesCommand is the iptables the DNAT reference is written with: the
// guest kernel has the legacy backend only (its nf_tables lacks the ip
// family), the host's plain iptables is what an operator would type.
func iptablesCommand() string {
	if guest.InGuest() {
		return "iptables-legacy"
	}
	return "iptables"
}

// dnatRules are the reference's rules for vip, as iptables arguments
// after -A/-D: the service's two ports to every endpoint in turn (the nth
// rule takes every (n-i)th new flow it sees, the last all that reach it),
// so the reference spreads flows over the same servers as the modes do
// and differs from them only in how the proxy picks one. With one
// endpoint the rate is that of one server socket, which is not what a
// mode is compared on.
func (d *DataLab) dnatRules(vip netip.Addr) [][]string {
	var rules [][]string
	for _, p := range []struct {
		proto        string
		port, target int
	}{{"tcp", BenchHTTPPort, lab.NginxPort}, {"udp", BenchUDPPort, lab.UDPPlainEchoPort}} {
		for i, ep := range d.Endpoints {
			rule := []string{"PREROUTING", "-d", vip.String() + "/32", "-p", p.proto, "-m", p.proto, "--dport", fmt.Sprint(p.port)}
			if left := len(d.Endpoints) - i; left > 1 {
				rule = append(rule, "-m", "statistic", "--mode", "nth", "--every", fmt.Sprint(left), "--packet", "0")
			}
			rules = append(rules, append(rule, "-j", "DNAT", "--to-destination", netip.AddrPortFrom(ep, uint16(p.target)).String()))
		}
	}
	return rules
}

// InstallDNAT installs the reference path on the node: hand-written nat
// PREROUTING DNAT rules sending vip's HTTP port to the endpoints' nginx
// and its UDP port to their echo, in turn (dnatRules). remove deletes them.
func (d *DataLab) InstallDNAT(vip netip.Addr) (remove func() error, err error) {
	ipt := iptablesCommand()
	var installed [][]string
	remove = func() error {
		var errs []error
		for _, r := range slices.Backward(installed) {
			if _, err := d.Topo.Node.Exec(ipt, append([]string{"-w", "-t", "nat", "-D"}, r...)...); err != nil {
				errs = append(errs, err)
			}
		}
		installed = nil
		if err := errors.Join(errs...); err != nil {
			return fmt.Errorf("removing the DNAT reference: %w", err)
		}
		return nil
	}
	for _, r := range d.dnatRules(vip) {
		if _, err := d.Topo.Node.Exec(ipt, append([]string{"-w", "-t", "nat", "-A"}, r...)...); err != nil {
			return nil, errors.Join(fmt.Errorf("installing the DNAT reference: %w", err), remove())
		}
		installed = append(installed, r)
	}
	return remove, nil
}

// CheckAnswers checks that vip answers one HTTP request and one UDP echo
// from the client: a path that does not would otherwise show up as a
// workload measuring nothing but timeouts.
func (d *DataLab) CheckAnswers(ctx context.Context, vip netip.Addr) error {
	t := d.Target(vip)
	url := "http://" + t.HTTP.String() + "/"
	status, body, err := lab.HTTPGetStatus(d.Topo.Client, url)
	if err != nil {
		return fmt.Errorf("no HTTP answer through %s from the client: %w", t.HTTP, err)
	}
	if want := d.Servers.Name; status != 200 || body != want {
		return fmt.Errorf("HTTP through %s answered %d %q, want 200 %q", t.HTTP, status, body, want)
	}
	const msg = "kproxy bench-modes"
	var errs []error
	for range 3 { // a datagram may be lost; three in a row is not chance
		if err := ctx.Err(); err != nil {
			return err
		}
		got, err := lab.UDPAsk(d.Topo.Client, t.UDP.String(), msg)
		if err == nil && got == msg {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("answered %q, want %q", got, msg)
		}
		errs = append(errs, err)
	}
	return fmt.Errorf("no UDP echo through %s from the client: %w", t.UDP, errors.Join(errs...))
}

// MeasureData runs every load workload repeats times through vip, round
// by round (each round keepalive, newconn, udp-rr, udp-flows, so slow
// drifts of the machine spread over all of them), each run lasting runFor,
// and returns each workload's medians. It first checks that vip answers at
// all. alive, if not nil, is called after each run: its error (the proxy
// under test died) ends the measurement.
func (d *DataLab) MeasureData(ctx context.Context, vip netip.Addr, runFor time.Duration, repeats int,
	alive func() error) (map[string]Workload, error) {
	runs, err := d.MeasureRuns(ctx, vip, runFor, repeats, alive)
	if err != nil {
		return nil, err
	}
	return SummarizeRuns(runs), nil
}

// MeasureRuns is MeasureData's runs before they are summarized, so that
// runs measured at different times (the reference, before and after the
// modes of a size) can be pooled.
func (d *DataLab) MeasureRuns(ctx context.Context, vip netip.Addr, runFor time.Duration, repeats int,
	alive func() error) (map[string][]load.Result, error) {
	if repeats < 1 || runFor <= 0 {
		return nil, fmt.Errorf("MeasureData: %d repeats of %v, want at least one run of a positive length", repeats, runFor)
	}
	if err := d.CheckAnswers(ctx, vip); err != nil {
		return nil, fmt.Errorf("before measuring through %s: %w", vip, err)
	}
	target := d.Target(vip)
	runs := map[string][]load.Result{}
	for round := range repeats {
		for _, w := range load.Workloads() {
			r, err := runAnswered(ctx, runFor, func(d time.Duration) (load.Result, error) { return load.Run(ctx, w, target, d) })
			if err != nil {
				return nil, fmt.Errorf("%s through %s, run %d of %d: %w", w, vip, round+1, repeats, err)
			}
			runs[w] = append(runs[w], r)
			if alive != nil {
				if err := alive(); err != nil {
					return nil, fmt.Errorf("after %s run %d of %d through %s: %w", w, round+1, repeats, vip, err)
				}
			}
		}
	}
	return runs, nil
}

// unansweredRetries is how many times runAnswered runs a workload again
// after a run in which nothing was answered.
const unansweredRetries = 2

// runAnswered runs one workload for runFor (run, a load.Run), and again,
// each time twice as long, while a run answers nothing. CheckAnswers has
// shown that the path answers, so such a run ended before its first
// answer: on a loaded machine a short run can (a relay not given the CPU
// in time, wrk's connections still opening). A path that stopped
// answering fails every run, and the last error stands.
func runAnswered(ctx context.Context, runFor time.Duration, run func(time.Duration) (load.Result, error)) (load.Result, error) {
	r, err := run(runFor)
	for retry := 0; retry < unansweredRetries && errors.Is(err, load.ErrNothingAnswered) && ctx.Err() == nil; retry++ {
		runFor *= 2
		r, err = run(runFor)
	}
	return r, err
}

// SummarizeRuns summarizes each workload's runs (summarizeRuns).
func SummarizeRuns(runs map[string][]load.Result) map[string]Workload {
	out := make(map[string]Workload, len(runs))
	for w, rs := range runs {
		out[w] = summarizeRuns(rs)
	}
	return out
}

// summarizeRuns is one workload's Workload: medians of its runs, every rate,
// the summed errors.
func summarizeRuns(runs []load.Result) Workload {
	var w Workload
	var rates, p50, p99, cpu []float64
	for _, r := range runs {
		rates = append(rates, r.Rate)
		p50 = append(p50, durationMillis(r.P50))
		p99 = append(p99, durationMillis(r.P99))
		cpu = append(cpu, float64(r.CPUPerOp())/float64(time.Microsecond))
		w.Lost += r.Errors
	}
	w.Rates = rates
	w.Rate, w.P50, w.P99, w.CPUPerOp = benchtable.Median(rates), benchtable.Median(p50), benchtable.Median(p99), benchtable.Median(cpu)
	return w
}

func durationMillis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchService is the measured service and its EndpointSlice: ports http
// (BenchHTTPPort → lab.NginxPort, TCP) and udp (BenchUDPPort →
// lab.UDPPlainEchoPort, UDP), one ready endpoint per address.
func BenchService(endpoints []netip.Addr) (*v1.Service, *discovery.EndpointSlice) {
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: BenchServiceName, Namespace: syncscale.Namespace},
		Spec: v1.ServiceSpec{
			Type:      v1.ServiceTypeClusterIP,
			ClusterIP: BenchVIP.String(),
			Ports: []v1.ServicePort{
				{Name: benchHTTPName, Port: BenchHTTPPort, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(lab.NginxPort)},
				{Name: benchUDPName, Port: BenchUDPPort, Protocol: v1.ProtocolUDP, TargetPort: intstr.FromInt32(lab.UDPPlainEchoPort)},
			},
		},
	}
	httpName, udpName := benchHTTPName, benchUDPName
	httpPort, udpPort := int32(lab.NginxPort), int32(lab.UDPPlainEchoPort)
	tcp, udp := v1.ProtocolTCP, v1.ProtocolUDP
	slice := &discovery.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: BenchSliceName, Namespace: syncscale.Namespace,
			Labels: map[string]string{discovery.LabelServiceName: BenchServiceName}},
		AddressType: discovery.AddressTypeIPv4,
		Ports: []discovery.EndpointPort{
			{Name: &httpName, Port: &httpPort, Protocol: &tcp},
			{Name: &udpName, Port: &udpPort, Protocol: &udp},
		},
	}
	for _, ip := range endpoints {
		ready := true
		slice.Endpoints = append(slice.Endpoints, discovery.Endpoint{
			Addresses:  []string{ip.String()},
			Conditions: discovery.EndpointConditions{Ready: &ready},
		})
	}
	return svc, slice
}

// ServicesYAML is a services file (kproxy's --services-file, ipvsref's
// -services-file) holding the Node nodeName at nodeIP, padding bulk
// services (syncscale.BulkService 0…padding-1, the same objects the host
// benchmark creates in the API server) and the measured service last.
func ServicesYAML(nodeName string, nodeIP netip.Addr, padding int, endpoints []netip.Addr) string {
	return servicesFile(nodeName, nodeIP, servicesWithPadding(padding, endpoints))
}

// serviceObjects is a service and its one EndpointSlice.
type serviceObjects struct {
	svc   *v1.Service
	slice *discovery.EndpointSlice
}

// servicesWithPadding are ServicesYAML's services: padding bulk ones, then
// the measured one.
func servicesWithPadding(padding int, endpoints []netip.Addr) []serviceObjects {
	out := make([]serviceObjects, 0, padding+1)
	for i := range padding {
		svc, slice := syncscale.BulkService(i)
		out = append(out, serviceObjects{svc, slice})
	}
	svc, slice := BenchService(endpoints)
	return append(out, serviceObjects{svc, slice})
}

// servicesFile is the services file holding the Node and services.
func servicesFile(nodeName string, nodeIP netip.Addr, services []serviceObjects) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: v1
kind: Node
metadata: {name: %[1]s, labels: {kubernetes.io/hostname: %[1]s}}
status: {addresses: [{type: InternalIP, address: %[2]s}]}
`, nodeName, nodeIP)
	for _, s := range services {
		b.WriteString(serviceYAML(s.svc, s.slice))
	}
	return b.String()
}

// serviceYAML is a service and its slice as two YAML documents,
// in flow style to keep a file of 10,000 services small. It writes the
// fields BenchService and syncscale.BulkService set (TestServicesYAML
// decodes the file back and compares).
func serviceYAML(svc *v1.Service, slice *discovery.EndpointSlice) string {
	b := &strings.Builder{}
	fmt.Fprintf(b, "---\napiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: %s}\nspec:\n", svc.Name, svc.Namespace)
	if svc.Spec.Type != "" {
		fmt.Fprintf(b, "  type: %s\n", svc.Spec.Type)
	}
	fmt.Fprintf(b, "  clusterIP: %s\n  ports:\n", svc.Spec.ClusterIP)
	for _, p := range svc.Spec.Ports {
		fmt.Fprintf(b, "  - {name: %s, port: %d, protocol: %s, targetPort: %s}\n", p.Name, p.Port, p.Protocol, p.TargetPort.String())
	}
	fmt.Fprintf(b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: %s, namespace: %s, labels: {%s: %s}}\naddressType: %s\nports:\n",
		slice.Name, slice.Namespace, discovery.LabelServiceName, slice.Labels[discovery.LabelServiceName], slice.AddressType)
	for _, p := range slice.Ports {
		fmt.Fprintf(b, "- {name: %s, port: %d, protocol: %s}\n", valueOf(p.Name), valueOf(p.Port), valueOf(p.Protocol))
	}
	if len(slice.Endpoints) == 0 {
		b.WriteString("endpoints: []\n")
		return b.String()
	}
	b.WriteString("endpoints:\n")
	for _, ep := range slice.Endpoints {
		fmt.Fprintf(b, "- {addresses: [%s]", strings.Join(ep.Addresses, ", "))
		if ep.Conditions.Ready != nil {
			fmt.Fprintf(b, ", conditions: {ready: %t}", *ep.Conditions.Ready)
		}
		if ep.NodeName != nil {
			fmt.Fprintf(b, ", nodeName: %s", *ep.NodeName)
		}
		b.WriteString("}\n")
	}
	return b.String()
}

func valueOf[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}
