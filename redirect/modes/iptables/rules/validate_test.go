package rules

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		errs   []string // substrings the error must contain; none: valid
	}{
		{"defaults", func(*Config) {}, nil},
		{"bit 0 and 31 are fine", func(c *Config) { c.MasqueradeBit = 31 }, nil},
		{"unknown family", func(c *Config) { c.Family = "IPv5" }, []string{`unknown Family "IPv5"`}},
		{"masquerade bit too large", func(c *Config) { c.MasqueradeBit = 32 }, []string{"MasqueradeBit: 32 is outside 0-31"}},
		{"masquerade bit negative", func(c *Config) { c.MasqueradeBit = -1 }, []string{"MasqueradeBit: -1"}},
		{"IPv6 cluster CIDR in IPv4", func(c *Config) { c.ClusterCIDRs = testkit.Prefixes("198.19.1.0/24", "fd00::/64") },
			[]string{"ClusterCIDRs[1]: fd00::/64 is not an IPv4 prefix"}},
		{"invalid nodeport prefix", func(c *Config) { c.NodePortAddresses = []netip.Prefix{{}} },
			[]string{"NodePortAddresses[0]: not a valid prefix"}},
		{"mapped prefix", func(c *Config) { c.NodePortAddresses = testkit.Prefixes("::ffff:198.19.0.0/120") },
			[]string{"NodePortAddresses[0]: ::ffff:198.19.0.0/120 is an IPv4-mapped"}},
		{"IPv6 node IP", func(c *Config) { c.NodeIPs = testkit.Addrs("fd00::1") }, []string{"NodeIPs[0]: fd00::1 is not an IPv4 address"}},
		{"zoned interface address", func(c *Config) { c.Family, c.InterfaceAddrs = ipfamily.IPv6, testkit.Addrs("fe80::1%eth0") },
			[]string{"InterfaceAddrs[0]: fe80::1%eth0 has a zone", "NodeIPs[0]: 198.19.0.1 is not an IPv6 address"}},
		{"every problem is reported", func(c *Config) { c.MasqueradeBit = 40; c.NodeIPs = []netip.Addr{{}} },
			[]string{"MasqueradeBit", "NodeIPs[0]: not a valid address"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := v4Config()
			tt.change(&cfg)
			err := Validate(cfg)
			if len(tt.errs) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate accepted the config; want an error mentioning %q", tt.errs)
			}
			for _, want := range tt.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not mention %q", err, want)
				}
			}
			if _, err := New(cfg); err == nil {
				t.Error("New accepted a config Validate refuses")
			}
			if SharedChains(cfg) != nil || Jumps(cfg) != nil {
				t.Error("SharedChains/Jumps built rules for an invalid config")
			}
		})
	}
}

// TestForPortRefusesWhatItCannotExpress: bad input is an error naming the
// service port, never a panic or a broken restore payload.
func TestForPortRefusesWhatItCannotExpress(t *testing.T) {
	ok := func() *servicemap.ServicePort {
		return testkit.Port("default", "web", 80, "198.18.0.10", testkit.Endpoints(testkit.EP("198.19.1.11:8080")))
	}
	change := func(f func(*servicemap.ServicePort)) *servicemap.ServicePort { sp := ok(); f(sp); return sp }
	tests := []struct {
		name string
		sp   *servicemap.ServicePort
		err  string
	}{
		{"nil port", nil, "service port is nil"},
		{"unknown protocol", change(func(sp *servicemap.ServicePort) { sp.Name.Protocol = "ICMP" }), `protocol "ICMP" is not TCP, UDP or SCTP`},
		{"port 0", change(func(sp *servicemap.ServicePort) { sp.Port = 0 }), "port 0"},
		{"quote in a name", change(func(sp *servicemap.ServicePort) { sp.Name.Name = `we"b` }), `name "we\"b"`},
		{"space in a port name", change(func(sp *servicemap.ServicePort) { sp.Name.Port = "a b" }), `port name "a b"`},
		{"name too long for a comment", change(func(sp *servicemap.ServicePort) { sp.Name.Name = strings.Repeat("n", 200) }), "iptables comments allow"},
		{"sub-second affinity", change(func(sp *servicemap.ServicePort) { sp.AffinityTimeout = time.Millisecond }), "affinity timeout 1ms"},
		{"endpoint port 0", change(func(sp *servicemap.ServicePort) { sp.Endpoints[0].Port = 0 }), "endpoint 198.19.1.11:0"},
	}
	b := mustBuilder(t, v4Config())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := b.ForPort(tt.sp)
			if err == nil {
				t.Fatalf("ForPort accepted it; want an error mentioning %q", tt.err)
			}
			if !strings.Contains(err.Error(), tt.err) {
				t.Errorf("error %q does not mention %q", err, tt.err)
			}
			if tt.sp != nil && !strings.Contains(err.Error(), tt.sp.Name.String()) {
				t.Errorf("error %q does not name the service port %s", err, tt.sp.Name)
			}
		})
	}
}

// TestForPortOtherFamilyContributesNothing: each family is programmed on
// its own, and a port without a cluster IP of the family is absent, even
// when its external addresses are of that family.
func TestForPortOtherFamilyContributesNothing(t *testing.T) {
	sp := testkit.Port("default", "v4", 80, "198.18.0.10", testkit.NodePort(30080), testkit.ExternalIPs("fd00:18::1"),
		testkit.Endpoints(testkit.EP("[fd00:19:1::11]:8080")))
	sp.Name.Protocol = v1.ProtocolUDP
	pr, err := mustBuilder(t, v6Config()).ForPort(sp)
	if err != nil {
		t.Fatal(err)
	}
	if pr.Name != sp.Name || len(pr.Chains) != 0 || len(pr.Shared) != 0 {
		t.Errorf("IPv6 rules for a port without an IPv6 cluster IP: %+v", pr)
	}
}
