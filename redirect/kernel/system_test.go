package kernel

import (
	"os"
	"testing"

	"kproxy.dev/kproxy/sync/sysctl/fakesysctl"
)

func TestIPv6Off(t *testing.T) {
	if _, err := os.Stat("/proc/net/if_inet6"); err != nil {
		t.Skipf("this kernel has no IPv6: %v", err)
	}
	tests := []struct {
		name    string
		sysctls map[string]string
		wantOff bool
	}{
		{"enabled", map[string]string{"net/ipv6/conf/all/disable_ipv6": "0"}, false},
		{"disabled by sysctl", map[string]string{"net/ipv6/conf/all/disable_ipv6": "1\n"}, true},
		{"an unreadable sysctl does not disable it", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NetlinkSystem{Sysctls: fakesysctl.New(tt.sysctls)}.IPv6Off()
			if (err != nil) != tt.wantOff {
				t.Errorf("IPv6Off() = %v, want off: %v", err, tt.wantOff)
			}
		})
	}
}

func TestProtocolAndModuleLists(t *testing.T) {
	protocols := "protocol  size sockets  memory press maxhdr  slab module     cl co\n" +
		"SCTPv6    1664      0       0   no     304   yes  sctp       y  y\n" +
		"SCTP      1632      2       0   no     304   yes  sctp       y  y\n" +
		"TCP       2560     10       3   no     320   yes  kernel     y  y\n"
	modulesDep := "kernel/net/sctp/sctp.ko.xz: kernel/lib/libcrc32c.ko.xz\n" +
		"kernel/net/netfilter/ipvs/ip_vs.ko: kernel/net/netfilter/nf_conntrack.ko\n" +
		"kernel/drivers/net/dummy.ko.zst:\n" +
		"kernel/net/ipv4/netfilter/nf_nat_snmp_basic.ko:\n"
	for _, c := range []struct {
		what string
		got  bool
		want bool
	}{
		{"SCTP registered", protocolListed(protocols, "SCTP"), true},
		{"TCP registered", protocolListed(protocols, "TCP"), true},
		{"UDP not registered", protocolListed(protocols, "UDP"), false},
		{"sctp in modules.dep (xz)", moduleListed(modulesDep, "sctp"), true},
		{"ip_vs in modules.dep", moduleListed(modulesDep, "ip_vs"), true},
		{"dummy in modules.dep (zst, no dependencies)", moduleListed(modulesDep, "dummy"), true},
		{"a dependency only is not listed", moduleListed(modulesDep, "libcrc32c"), false},
		{"a name inside another", moduleListed(modulesDep, "nat"), false},
		{"empty modules.dep", moduleListed("", "sctp"), false},
	} {
		if c.got != c.want {
			t.Errorf("%s: got %t, want %t", c.what, c.got, c.want)
		}
	}
}
