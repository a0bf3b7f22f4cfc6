package handles

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/moby/ipvs"
	"github.com/vishvananda/netlink/nl"
	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
)

func TestSetEntriesRoundTripThroughNetlink(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.19.1.1")
	tests := []struct {
		typ string
		e   desired.Entry
	}{
		{desired.BitmapPort, desired.Entry{Port: 30080}},
		{desired.HashIP, desired.Entry{IP: a}},
		{desired.HashIPPort, desired.Entry{IP: a, Protocol: v1.ProtocolSCTP, Port: 80}},
		{desired.HashIPPortIP, desired.Entry{IP: a, Protocol: v1.ProtocolTCP, Port: 80, IP2: b}},
		{desired.HashIPPortNet, desired.Entry{IP: a, Protocol: v1.ProtocolUDP, Port: 53, Net: netip.MustParsePrefix("203.0.113.0/25")}},
		{desired.HashIPPort, desired.Entry{IP: netip.MustParseAddr("fd00:18::1"), Protocol: v1.ProtocolTCP, Port: 443}},
	}
	for _, tt := range tests {
		ne, err := toNetlink(tt.e)
		if err != nil {
			t.Fatalf("toNetlink(%s): %v", tt.e, err)
		}
		if got := fromNetlink(tt.typ, *ne); got != tt.e {
			t.Errorf("%s %s came back as %s", tt.typ, tt.e, got)
		}
	}
	if _, err := toNetlink(desired.Entry{IP: a, Protocol: "ICMP", Port: 1}); err == nil {
		t.Error("toNetlink accepted an unknown protocol")
	}
	// The netlink package would drop a zero CIDR and the kernel would
	// store 0.0.0.0/32 instead.
	everyone := desired.Entry{IP: a, Protocol: v1.ProtocolTCP, Port: 80, Net: netip.MustParsePrefix("0.0.0.0/0")}
	if _, err := toNetlink(everyone); !errors.Is(err, nl.IPSetError(nl.IPSET_ERR_INVALID_CIDR)) {
		t.Errorf("toNetlink(%s) = %v, want the kernel's invalid-CIDR error", everyone, err)
	}
}

func TestVirtualServersRoundTrip(t *testing.T) {
	for _, vs := range []desired.VirtualServer{
		{Key: desired.Key{Addr: netip.MustParseAddr("198.18.0.1"), Protocol: v1.ProtocolTCP, Port: 80}, Scheduler: "rr"},
		{Key: desired.Key{Addr: netip.MustParseAddr("fd00:18::1"), Protocol: v1.ProtocolSCTP, Port: 9}, Scheduler: "mh",
			Flags: desired.FlagPersistent | desired.FlagMHPort, Timeout: 60},
	} {
		s := ToService(vs)
		s.Flags |= desired.FlagHashed // as the kernel lists it
		if got, ok := FromService(s); !ok || got != vs {
			t.Errorf("%+v came back as %+v (ok %v)", vs, got, ok)
		}
	}
	if _, ok := FromService(fwmarkService()); ok {
		t.Error("a firewall-mark service was taken for one of ours")
	}
}

// fwmarkService is a service kproxy never makes: matched by firewall mark.
func fwmarkService() *ipvs.Service { return &ipvs.Service{FWMark: 7, SchedName: "rr"} }
