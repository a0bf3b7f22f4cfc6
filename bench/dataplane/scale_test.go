package dataplane

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/yaml"
)

func TestParseScales(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "", want: []int{1, 10000}},
		{in: "10000,30000", want: []int{1, 10000, 30000}},
		{in: "30000, 10000,10000", want: []int{1, 10000, 30000}},
		{in: "1", want: []int{1}},
		{in: "100000", wantErr: true},
		{in: "0", wantErr: true},
		{in: "ten", wantErr: true},
	} {
		got, err := ParseScales(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseScales(%q) error %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseScales(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestParseScaleConfig(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    ScaleConfig
		wantErr bool
	}{
		{in: "kproxy-local@10000", want: ScaleConfig{KproxyLocal, 10000}},
		{in: "dnat@1", want: ScaleConfig{DNAT, 1}},
		{in: "kproxy-iptables@30000", want: ScaleConfig{KproxyIPTables, 30000}},
		{in: "kproxy-nftables@10000", want: ScaleConfig{KproxyNFTables, 10000}},
		{in: "haproxy@10", wantErr: true},
		{in: "kproxy", wantErr: true},
		{in: "kproxy@0", wantErr: true},
	} {
		got, err := ParseScaleConfig(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseScaleConfig(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err == nil && got.String() != tc.in {
			t.Errorf("ParseScaleConfig(%q).String() = %q", tc.in, got.String())
		}
	}
}

func TestScaleServicesYAML(t *testing.T) {
	vip, backend := netip.MustParseAddr("198.18.2.1"), netip.MustParseAddr("198.19.1.11")
	for _, n := range []int{1, 3, 500} {
		docs := strings.Split(ScaleServicesYAML(n, vip, backend, 80, 5353), "\n---\n")
		if len(docs) != 1+2*n {
			t.Fatalf("%d services: %d documents, want a Node and %d Service/EndpointSlice pairs", n, len(docs), n)
		}
		vips := map[string]bool{}
		for i, d := range docs[1:] {
			if i%2 == 0 {
				var svc v1.Service
				if err := yaml.UnmarshalStrict([]byte(d), &svc); err != nil {
					t.Fatalf("%d services: document %d: %v\n%s", n, i+1, err, d)
				}
				if vips[svc.Spec.ClusterIP] || !strings.HasPrefix(svc.Spec.ClusterIP, "198.18.") {
					t.Fatalf("%d services: cluster IP %s repeated or outside 198.18.0.0/16", n, svc.Spec.ClusterIP)
				}
				vips[svc.Spec.ClusterIP] = true
				continue
			}
			var slice discoveryv1.EndpointSlice
			if err := yaml.UnmarshalStrict([]byte(d), &slice); err != nil {
				t.Fatalf("%d services: document %d: %v\n%s", n, i+1, err, d)
			}
			if len(slice.Endpoints) != 1 || !strings.HasPrefix(slice.Endpoints[0].Addresses[0], "198.19.") {
				t.Fatalf("%d services: slice %s endpoints %v, want one in 198.19.0.0/16", n, slice.Name, slice.Endpoints)
			}
		}
		if last := docs[len(docs)-2]; !strings.Contains(last, "clusterIP: "+vip.String()+"\n") {
			t.Errorf("%d services: the last Service is not the measured one on %s:\n%s", n, vip, last)
		}
	}
}

func TestScaleDNATRules(t *testing.T) {
	vip, backend := netip.MustParseAddr("198.18.2.1"), netip.MustParseAddr("198.19.1.11")
	for _, tc := range []struct {
		n, wantJumps int
	}{{1, 2}, {10, 11}, {10000, 10001}} {
		rules := ScaleDNATRules(tc.n, vip, backend, 80, 5353)
		var jumps []string
		for _, l := range strings.Split(rules, "\n") {
			if strings.HasPrefix(l, "-A KUBE-SERVICES -d ") {
				jumps = append(jumps, l)
			}
		}
		if len(jumps) != tc.wantJumps {
			t.Fatalf("%d services: %d KUBE-SERVICES service rules, want %d", tc.n, len(jumps), tc.wantJumps)
		}
		// The measured service's two ports come last: a new flow to it is
		// matched against every other service's rule first.
		for i, proto := range []string{"tcp", "udp"} {
			if l := jumps[len(jumps)-2+i]; !strings.HasPrefix(l, "-A KUBE-SERVICES -d 198.18.2.1/32 -p "+proto) {
				t.Errorf("%d services: rule %d is %q, want the measured %s port", tc.n, len(jumps)-1+i, l, proto)
			}
		}
		for _, want := range []string{
			"-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n",
			"-j DNAT --to-destination 198.19.1.11:5353\n",
			"-m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\nCOMMIT\n",
		} {
			if !strings.Contains(rules, want) {
				t.Errorf("%d services: rules lack %q", tc.n, want)
			}
		}
		if got, want := strings.Count(rules, "-j DNAT"), tc.n+1; got != want {
			t.Errorf("%d services: %d DNAT rules, want %d", tc.n, got, want)
		}
	}
}

func TestScaleTableMarkdown(t *testing.T) {
	tab := &ScaleTable{Scales: []int{1, 10000}, Subject: KproxyLocal, MaxDrop: 0.05, Header: []string{"Date: today"}, Notes: []string{"a note"}}
	for _, v := range []struct {
		metric string
		n      int
		p      Path
		v      float64
	}{
		{"newconn-rate", 1, DNAT, 10000}, {"newconn-rate", 1, KproxyIPTables, 9800}, {"newconn-rate", 1, Kproxy, 6000}, {"newconn-rate", 1, KproxyLocal, 6200},
		{"newconn-rate", 10000, DNAT, 4000}, {"newconn-rate", 10000, KproxyIPTables, 4100}, {"newconn-rate", 10000, Kproxy, 3000}, {"newconn-rate", 10000, KproxyLocal, 6100},
		{"newconn-rate", 1, KproxyNFTables, 9900}, {"newconn-rate", 10000, KproxyNFTables, 9700},
		{"udp-flows-rate", 1, DNAT, 8000}, {"udp-flows-rate", 1, KproxyLocal, 5000},
		{"udp-flows-rate", 10000, DNAT, 6000}, {"udp-flows-rate", 10000, KproxyLocal, 4000},
		{"startup", 10000, KproxyLocal, 3.25},
	} {
		tab.Set(v.metric, v.n, v.p, v.v)
	}
	tab.Skip(10000, KproxyIPTables, "fd limit") // shown only where no value is
	md := tab.Markdown()
	for _, want := range []string{
		"Date: today  ",
		"| measurement | iptables DNAT, kube-proxy-shaped rules | kproxy iptables mode | kproxy nftables mode | kproxy userspace, REDIRECT portals | kproxy userspace, local portals | local portals target |",
		"| new-connection requests, wrk `Connection: close`, 1 service (req/s) | 10000 | 9800 (98%) | 9900 (99%) | 6000 (60%) | 6200 (62%) |  |",
		"| new-connection requests, wrk `Connection: close`, 10,000 services (req/s) | 4000 (40% / 40%) | 4100 (41% / 42%) | 9700 (97% / 98%) | 3000 (30% / 50%) | 6100 (61% / 98%) | ≥ 95% of own 1-service rate: 98% ✓; behind kproxy nftables mode (0.63×) ✗ |",
		"| new UDP flows, one 64-byte request/response each, 10,000 services (flows/s) | 6000 (75% / 75%) | — (fd limit) | — | — | 4000 (50% / 80%) | ≥ 95% of own 1-service rate: 80% ✗; behind iptables DNAT, kube-proxy-shaped rules (0.67×) ✗ |",
		"| start-up: rules, routes and relays in place, 1 service (s) | — | — | — | — | — |  |",
		"| start-up: rules, routes and relays in place, 10,000 services (s) | — | — (fd limit) | — | — | 3.2 |  |",
		"a note  ",
	} {
		if !strings.Contains(md, want+"\n") {
			t.Errorf("table lacks the line\n%s\nin:\n%s", want, md)
		}
	}
}

func TestNFTRuleLines(t *testing.T) {
	ruleset := "table ip kube-proxy {\n\tcomment \"rules for kube-proxy\"\n" +
		"\tmap service-ips {\n\t\ttype ipv4_addr . inet_proto . inet_service : verdict\n\t\telements = { 198.18.0.1 . tcp . 80 : goto service-A }\n\t}\n" +
		"\tchain nat-prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tjump services\n\t}\n" +
		"\tchain service-A {\n\t\tcomment \"x\"\n\t\tmeta l4proto tcp dnat ip addr . port to numgen random mod 2 map { 0 : 198.19.0.2 . 80,\n\t\t\t1 : 198.19.0.3 . 80 }\n\t}\n}\n" +
		"table ip other {\n\tchain c {\n\t\taccept\n\t}\n}\n"
	if got := nftRuleLines(ruleset); got != 3 {
		t.Errorf("nftRuleLines = %d, want 3 (jump, dnat, accept)", got)
	}
}

func TestFittingScale(t *testing.T) {
	for _, tc := range []struct{ limit, loops, want int }{
		{20000, 2, 5000}, // this machine: 3 descriptors per port
		{20000, 1, 8000},
		{200000, 2, 65000},
		{5000, 2, 0},
	} {
		if got := fittingScale(tc.limit, tc.loops); got != tc.want {
			t.Errorf("fittingScale(%d, %d) = %d, want %d", tc.limit, tc.loops, got, tc.want)
		}
		if n := fittingScale(tc.limit, tc.loops); n > 0 && userspaceFDs(n+1, tc.loops) > tc.limit {
			t.Errorf("fittingScale(%d, %d) = %d needs %d descriptors", tc.limit, tc.loops, n, userspaceFDs(n+1, tc.loops))
		}
	}
}

func TestParseUDPFlowsResult(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    UDPFlowsResult
		wantErr bool
	}{
		{in: "flows=120 lost=2 skipped=0 elapsed=4.001s\n", want: UDPFlowsResult{120, 2, 0, 4001 * time.Millisecond}},
		{in: "noise flows=1 lost=0 skipped=3 elapsed=1s", want: UDPFlowsResult{1, 0, 3, time.Second}},
		{in: "flows=1 lost=0 elapsed=1s", wantErr: true},
		{in: "flows=x lost=0 skipped=0 elapsed=1s", wantErr: true},
	} {
		got, err := ParseUDPFlowsResult(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseUDPFlowsResult(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
		if err == nil {
			if back, _ := ParseUDPFlowsResult(got.String()); back != got {
				t.Errorf("%v does not survive String and back: %v", got, back)
			}
		}
	}
}

// TestRunUDPFlows runs the new-flow client against an echo on loopback:
// every flow gets its own source port, and a port another socket holds is
// skipped, not an error.
func TestRunUDPFlows(t *testing.T) {
	echo, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer echo.Close()
	peers := make(chan netip.AddrPort, 1000)
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := echo.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			select {
			case peers <- from:
			default:
			}
			_, _ = echo.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	// Hold one port of the range, so the run must skip it.
	held, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	port := held.LocalAddr().(*net.UDPAddr).Port
	res, err := RunUDPFlows(context.Background(), UDPFlowsOptions{
		Target:  echo.LocalAddr().(*net.UDPAddr).AddrPort(),
		Sources: []netip.Addr{netip.MustParseAddr("127.0.0.1")},
		PortLo:  port, PortHi: port + 3, Workers: 2,
		Duration: 200 * time.Millisecond, Payload: 64, Timeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Flows == 0 || res.Lost != 0 || res.Skipped == 0 || res.Rate() <= 0 {
		t.Errorf("RunUDPFlows = %v, want flows, none lost, some skipped (port %d is held)", res, port)
	}
	seen := map[uint16]bool{}
	for len(peers) > 0 {
		p := <-peers
		if p.Port() == uint16(port) || p.Port() < uint16(port) || p.Port() > uint16(port+3) {
			t.Errorf("a flow came from port %d, want %d..%d without %d", p.Port(), port, port+3, port)
		}
		seen[p.Port()] = true
	}
	if len(seen) != 3 {
		t.Errorf("flows came from ports %v, want each of the 3 free ports", seen)
	}
}

func TestScaleOrder(t *testing.T) {
	paths := []Path{DNAT, Kproxy, KproxyLocal}
	for _, tc := range []struct {
		round int
		want  []string
	}{
		{0, []string{"dnat@1", "kproxy@1", "kproxy-local@1", "dnat@10000", "kproxy@10000", "kproxy-local@10000"}},
		{1, []string{"kproxy@10000", "kproxy-local@10000", "dnat@10000", "kproxy@1", "kproxy-local@1", "dnat@1"}},
		{2, []string{"kproxy-local@1", "dnat@1", "kproxy@1", "kproxy-local@10000", "dnat@10000", "kproxy@10000"}},
	} {
		var got []string
		for _, c := range scaleOrder([]int{1, 10000}, paths, tc.round) {
			got = append(got, c.String())
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("round %d (-want +got):\n%s", tc.round, diff)
		}
	}
}

func TestSplitScaleRowID(t *testing.T) {
	for _, tc := range []struct {
		id     string
		metric string
		n      int
		ok     bool
	}{
		{ScaleRowID("newconn-rate", 10000), "newconn-rate", 10000, true},
		{ScaleRowID("udp-flows-machine-cpu", 1), "udp-flows-machine-cpu", 1, true},
		{"newconn-rate", "", 0, false},
		{"newconn-rate@x", "", 0, false},
	} {
		metric, n, ok := splitScaleRowID(tc.id)
		if ok != tc.ok || (ok && (metric != tc.metric || n != tc.n)) {
			t.Errorf("splitScaleRowID(%q) = %q, %d, %v; want %q, %d, %v", tc.id, metric, n, ok, tc.metric, tc.n, tc.ok)
		}
	}
}
