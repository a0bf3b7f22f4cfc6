package conntrack

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// Helpers for tests on the kernel's conntrack table (inside the fresh
// network namespace of lab.InFreshNetns).

// tcpEstablished is conntrack's TCP_CONNTRACK_ESTABLISHED.
const tcpEstablished = 3

// insertFlows creates flows in the current namespace's table, as DNAT would
// have left them: the reply comes from ReplySrc back to the client.
func insertFlows(h *netlink.Handle, flows ...Flow) error {
	for _, f := range flows {
		fam := inetFamily(ipfamily.Of(f.OrigDst.Addr()))
		ct := &netlink.ConntrackFlow{
			FamilyType: uint8(fam),
			Forward: netlink.IPTuple{Protocol: uint8(f.Protocol),
				SrcIP: net.IP(f.OrigSrc.Addr().AsSlice()), SrcPort: f.OrigSrc.Port(),
				DstIP: net.IP(f.OrigDst.Addr().AsSlice()), DstPort: f.OrigDst.Port()},
			Reverse: netlink.IPTuple{Protocol: uint8(f.Protocol),
				SrcIP: net.IP(f.ReplySrc.Addr().AsSlice()), SrcPort: f.ReplySrc.Port(),
				DstIP: net.IP(f.OrigSrc.Addr().AsSlice()), DstPort: f.OrigSrc.Port()},
			TimeOut: 3600,
		}
		if f.Protocol == TCP {
			ct.ProtoInfo = &netlink.ProtoInfoTCP{State: tcpEstablished}
		}
		if err := h.ConntrackCreate(netlink.ConntrackTable, fam, ct); err != nil {
			return fmt.Errorf("creating conntrack flow %v: %w", f, err)
		}
	}
	return nil
}

// kernelFlows lists both families' flows, sorted by their text.
func kernelFlows(t testing.TB, h *netlink.Handle) []string {
	t.Helper()
	var out []string
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		flows, err := h.ConntrackTableList(netlink.ConntrackTable, fam)
		if err != nil {
			t.Fatalf("listing conntrack flows: %v", err)
		}
		for _, f := range flows {
			out = append(out, FlowOf(f).String())
		}
	}
	slices.Sort(out)
	return out
}

func netfilterHandle(t testing.TB) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandle(unix.NETLINK_NETFILTER)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// insertZonedFlow creates f in conntrack zone zone with the conntrack tool
// (netlink.ConntrackCreate sets no zone).
func insertZonedFlow(t testing.TB, f Flow, zone int) {
	t.Helper()
	lab.Run(t, "conntrack", "-I", "-w", strconv.Itoa(zone),
		"-p", f.Protocol.String(), "-t", "3600",
		"-s", f.OrigSrc.Addr().String(), "-d", f.OrigDst.Addr().String(),
		"--sport", strconv.Itoa(int(f.OrigSrc.Port())), "--dport", strconv.Itoa(int(f.OrigDst.Port())),
		"-r", f.ReplySrc.Addr().String(), "-q", f.OrigSrc.Addr().String(),
		"--reply-port-src", strconv.Itoa(int(f.ReplySrc.Port())), "--reply-port-dst", strconv.Itoa(int(f.OrigSrc.Port())))
}

// familyName is the conntrack tool's name of a family.
func familyName(f ipfamily.Family) string {
	if f == ipfamily.IPv6 {
		return "ipv6"
	}
	return "ipv4"
}
