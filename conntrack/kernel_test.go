package conntrack

import (
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/sysctl"
)

// Each test here runs in a fresh network namespace with its own conntrack
// table (lab.InFreshNetns), as root.

func TestNetlinkTableOnKernel(t *testing.T) {
	vip := ServiceAddress(ap("198.18.0.10:53"))
	vip6 := ServiceAddress(ap("[fd00:18::10]:53"))
	pinned := flow(UDP, "198.19.0.2:40001", "198.18.0.10:53", "198.19.1.11:9000")
	other := flow(UDP, "198.19.0.2:40002", "198.18.0.10:53", "198.19.1.12:9000")
	refused := flow(UDP, "198.19.0.2:40003", "198.18.0.10:53", "198.18.0.10:53")
	nodePort := flow(UDP, "198.19.0.2:40004", "198.19.0.1:30053", "198.19.1.11:9000")
	elsewhere := flow(UDP, "198.19.0.2:40005", "203.0.113.9:30053", "203.0.113.9:30053")
	tcpFlow := flow(TCP, "198.19.0.2:40006", "198.18.0.10:53", "198.19.1.11:9000")
	pinned6 := flow(UDP, "[fd00:19::2]:40001", "[fd00:18::10]:53", "[fd00:19:1::11]:9000")
	all := []Flow{pinned, other, refused, nodePort, elsewhere, tcpFlow, pinned6}
	node := testkit.Addrs("198.19.0.1", "127.0.0.1")

	tests := []struct {
		name string
		req  Request
		gone []Flow
	}{
		{"every UDP flow to a service address", Request{Family: ipfamily.IPv4, Filters: []Filter{AllFlowsTo(UDP, vip)}},
			[]Flow{pinned, other, refused}},
		{"an endpoint's flows, on the service address and the node port", Request{Family: ipfamily.IPv4, Local: node,
			Filters: []Filter{FlowsAnsweredBy(UDP, vip, ap("198.19.1.11:9000")), FlowsAnsweredBy(UDP, NodePortOf(ipfamily.IPv4, 30053), ap("198.19.1.11:9000"))}},
			[]Flow{pinned, nodePort}},
		{"untranslated flows", Request{Family: ipfamily.IPv4, Local: node,
			Filters: []Filter{UntranslatedFlowsTo(UDP, vip), UntranslatedFlowsTo(UDP, NodePortOf(ipfamily.IPv4, 30053))}},
			[]Flow{refused}},
		{"IPv6", Request{Family: ipfamily.IPv6, Filters: []Filter{AllFlowsTo(UDP, vip6)}}, []Flow{pinned6}},
		{"reconciliation", Request{Family: ipfamily.IPv4, Local: node, Reconcile: &Expectations{Endpoints: map[Destination][]netip.AddrPort{
			vip: {ap("198.19.1.12:9000")}, NodePortOf(ipfamily.IPv4, 30053): {ap("198.19.1.11:9000")},
		}}}, []Flow{pinned, refused}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if lab.InFreshNetns(t) {
				return
			}
			h := netfilterHandle(t)
			if err := insertFlows(h, all...); err != nil {
				t.Fatal(err)
			}
			table, err := NewNetlinkTable()
			if err != nil {
				t.Fatal(err)
			}
			defer table.Close()

			n, err := table.Delete(&tt.req)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for _, f := range all {
				if !slices.Contains(tt.gone, f) {
					want = append(want, f.String())
				}
			}
			slices.Sort(want)
			if diff := cmp.Diff(want, kernelFlows(t, h)); diff != "" {
				t.Errorf("flows left in the kernel (-want +got):\n%s", diff)
			}
			if n != len(tt.gone) {
				t.Errorf("Delete reported %d deleted, want %d", n, len(tt.gone))
			}
		})
	}
}

// TestNetlinkTableDeletesInBatches: a userspace-mode stop deletes every UDP
// flow to a service, tens of thousands under traffic. Deleting them one
// request and acknowledgement at a time kept the exiting process alive for
// seconds after its portals were gone (see BenchmarkStoppedRelays); the
// deletions go deleteBatch to a write. Flows in a conntrack zone (kept apart
// by a zone's rules) and IPv6 flows are deleted too, and only the selected
// ones.
func TestNetlinkTableDeletesInBatches(t *testing.T) {
	const clients = 5 * deleteBatch / 2 // three writes: two full, one half
	tests := []struct {
		name   string
		family ipfamily.Family
		vip    string
		client func(i int) netip.AddrPort
	}{
		{"IPv4", ipfamily.IPv4, "198.18.0.53:53", func(i int) netip.AddrPort {
			return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 19, 0, 2}), uint16(20000+i))
		}},
		{"IPv6", ipfamily.IPv6, "[fd00:18::53]:53", func(i int) netip.AddrPort {
			return netip.AddrPortFrom(netip.MustParseAddr("fd00:19::2"), uint16(20000+i))
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if lab.InFreshNetns(t) {
				return
			}
			vip := ap(tt.vip)
			relay := netip.AddrPortFrom(tt.client(0).Addr(), 40000) // REDIRECT answers from the node
			var selected []Flow
			for i := range clients {
				selected = append(selected, Flow{Protocol: UDP, OrigSrc: tt.client(i), OrigDst: vip, ReplySrc: relay})
			}
			kept := []Flow{
				{Protocol: TCP, OrigSrc: tt.client(clients + 1), OrigDst: vip, ReplySrc: relay},
				{Protocol: UDP, OrigSrc: tt.client(clients + 2), OrigDst: netip.AddrPortFrom(vip.Addr(), 54), ReplySrc: relay},
			}
			h := netfilterHandle(t)
			if err := insertFlows(h, append(slices.Clone(selected), kept...)...); err != nil {
				t.Fatal(err)
			}
			zoned := Flow{Protocol: UDP, OrigSrc: tt.client(clients), OrigDst: vip, ReplySrc: relay}
			insertZonedFlow(t, zoned, 7)

			table, err := NewNetlinkTable()
			if err != nil {
				t.Fatal(err)
			}
			defer table.Close()
			n, err := table.Delete(&Request{Family: tt.family, Filters: []Filter{AllFlowsTo(UDP, ServiceAddress(vip))}})
			if err != nil {
				t.Fatal(err)
			}
			if n != clients+1 {
				t.Errorf("Delete reported %d deleted, want %d", n, clients+1)
			}
			var want []string
			for _, f := range kept {
				want = append(want, f.String())
			}
			slices.Sort(want)
			if diff := cmp.Diff(want, kernelFlows(t, h)); diff != "" {
				t.Errorf("flows left in the kernel (-want +got):\n%s", diff)
			}
			if out := lab.Run(t, "conntrack", "-L", "-w", "7", "-f", familyName(tt.family)); strings.Contains(out, "dport=53") {
				t.Errorf("the zoned flow survived:\n%s", out)
			}
			// One write for the dump, one per batch of deletions: not one per flow.
			if want := 1 + (clients+1+deleteBatch-1)/deleteBatch; table.writes != want {
				t.Errorf("Delete wrote %d requests for %d flows, want %d (a dump and batches of %d)", table.writes, clients+1, want, deleteBatch)
			}
		})
	}
}

func TestTuneOnKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	// A namespace can set its own timeouts but not the table size.
	changes, err := Tune(Params{}, Settings{MaxPerCore: 32768, Min: 131072,
		TCPEstablishedTimeout: 2 * time.Hour, UDPTimeout: 45 * time.Second, UDPStreamTimeout: 150 * time.Second,
		TCPBeLiberal: true}, 2)
	if err == nil || !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "sysctl "+MaxSysctl) {
		t.Errorf("Tune error = %v, want nf_conntrack_max refused with a permission error naming it", err)
	}
	want := map[string]int{
		TCPEstablishedTimeoutSysctl: 7200, UDPTimeoutSysctl: 45, UDPStreamTimeoutSysctl: 150, TCPBeLiberalSysctl: 1,
	}
	for name, v := range want {
		got, err := sysctl.ReadInt(sysctl.Proc{}, name)
		if err != nil || got != v {
			t.Errorf("%s = %d (%v), want %d", name, got, err, v)
		}
	}
	var changed []string
	for _, c := range changes {
		changed = append(changed, c.Path)
	}
	slices.Sort(changed)
	wantChanged := []string{TCPBeLiberalSysctl, TCPEstablishedTimeoutSysctl, UDPTimeoutSysctl, UDPStreamTimeoutSysctl}
	slices.Sort(wantChanged)
	if diff := cmp.Diff(wantChanged, changed); diff != "" {
		t.Errorf("changes (-want +got):\n%s", diff)
	}
}

func TestBoundUDPPortsOnKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4zero})
	if err != nil {
		t.Fatal(err)
	}
	port := uint16(conn.LocalAddr().(*net.UDPAddr).Port)
	ports, err := BoundUDPPorts()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(ports, port) {
		t.Errorf("bound UDP ports %v lack the socket's port %d", ports, port)
	}
	conn.Close()
	if ports, err = BoundUDPPorts(); err != nil || slices.Contains(ports, port) {
		t.Errorf("bound UDP ports %v (%v) still hold port %d after its socket closed", ports, err, port)
	}
}
