package desired

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// realServersOf returns "addr:port" of the real servers of the service at key.
func realServersOf(t *testing.T, st *State, key string) []string {
	t.Helper()
	for _, s := range st.Services {
		if s.Key.String() == key {
			var out []string
			for _, rs := range s.RealServers {
				out = append(out, rs.AddrPort().String())
			}
			return out
		}
	}
	t.Fatalf("no virtual server %s in:\n%s", key, Dump(st))
	return nil
}

func TestRealServersFollowTrafficPolicies(t *testing.T) {
	eps := testkit.Endpoints(testkit.EP("198.19.1.11:80"), testkit.EP("198.19.1.12:80", testkit.Local), testkit.EP("198.19.1.13:80", testkit.Terminating))
	tests := []struct {
		name string
		port *servicemap.ServicePort
		key  string
		want []string
	}{
		{"cluster policy: ready ones", testkit.Port("d", "a", 80, "198.18.0.1", eps), "TCP/198.18.0.1:80",
			[]string{"198.19.1.11:80", "198.19.1.12:80"}},
		{"internal Local: local ready one", testkit.Port("d", "a", 80, "198.18.0.1", eps, testkit.InternalLocal()), "TCP/198.18.0.1:80",
			[]string{"198.19.1.12:80"}},
		{"internal Local without local endpoints: none", testkit.Port("d", "a", 80, "198.18.0.1", testkit.InternalLocal(),
			testkit.Endpoints(testkit.EP("198.19.1.11:80"))), "TCP/198.18.0.1:80", nil},
		{"external Local leaves the cluster IP alone", testkit.Port("d", "a", 80, "198.18.0.1", eps, testkit.NodePort(30000), testkit.ExternalLocal(0)),
			"TCP/198.18.0.1:80", []string{"198.19.1.11:80", "198.19.1.12:80"}},
		{"external Local narrows the NodePort", testkit.Port("d", "a", 80, "198.18.0.1", eps, testkit.NodePort(30000), testkit.ExternalLocal(0)),
			"TCP/198.19.0.1:30000", []string{"198.19.1.12:80"}},
		{"serving-terminating fallback", testkit.Port("d", "a", 80, "198.18.0.1",
			testkit.Endpoints(testkit.EP("198.19.1.13:80", testkit.Terminating))), "TCP/198.18.0.1:80", []string{"198.19.1.13:80"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := realServersOf(t, mustBuild(t, v4Config(), tt.port), tt.key)
			if !slices.Equal(got, tt.want) {
				t.Errorf("real servers = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestVirtualServerOptions(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		port      *servicemap.ServicePort
		wantFlags uint32
		wantTO    uint32
		wantSched string
	}{
		{"default scheduler", v4Config(), testkit.Port("d", "a", 80, "198.18.0.1"), 0, 0, "rr"},
		{"affinity is persistence", v4Config(), testkit.Port("d", "a", 80, "198.18.0.1", testkit.Affinity(90*time.Second)), FlagPersistent, 90, "rr"},
		{"mh hashes the port", testkit.With(v4Config(), func(c *Config) { c.Scheduler = "mh" }), testkit.Port("d", "a", 80, "198.18.0.1"), FlagMHPort, 0, "mh"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := mustBuild(t, tt.cfg, tt.port)
			if len(st.Services) != 1 {
				t.Fatalf("got %d virtual servers, want 1", len(st.Services))
			}
			vs := st.Services[0].VirtualServer
			if vs.Flags != tt.wantFlags || vs.Timeout != tt.wantTO || vs.Scheduler != tt.wantSched {
				t.Errorf("got %s, want flags %#x timeout %d scheduler %s", DescribeVirtualServer(vs), tt.wantFlags, tt.wantTO, tt.wantSched)
			}
		})
	}
}

func TestNodePortAddresses(t *testing.T) {
	local := testkit.Addrs("127.0.0.1", "198.19.0.1", "198.19.2.1")
	local6 := testkit.Addrs("::1", "fe80::1", "fd00:19::1")
	tests := []struct {
		name  string
		cfg   Config
		local []netip.Addr
		npa   []netip.Prefix
		want  []netip.Addr
	}{
		{"empty: every local address but loopback", v4Config(), local, nil, testkit.Addrs("198.19.0.1", "198.19.2.1")},
		{"a /0 matches all too", v4Config(), local, testkit.Prefixes("0.0.0.0/0"), testkit.Addrs("198.19.0.1", "198.19.2.1")},
		{"restricted, loopback left out", v4Config(), local, testkit.Prefixes("198.19.2.0/24", "127.0.0.0/8"), testkit.Addrs("198.19.2.1")},
		{"IPv6: neither loopback nor link-local", v6Config(), local6, nil, testkit.Addrs("fd00:19::1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testkit.With(tt.cfg, func(c *Config) { c.LocalAddrs, c.NodePortAddresses = tt.local, tt.npa })
			if got := nodePortIPs(cfg); !slices.Equal(got, tt.want) {
				t.Errorf("nodePortIPs = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestSetNameIPv6(t *testing.T) {
	tests := []struct{ base, want string }{
		{SetClusterIP, "KUBE-6-CLUSTER-IP"},
		{SetLBSourceCIDR, "KUBE-6-LOAD-BALANCER-SOURCE-CID"}, // cut to 31
		{"OTHER", "OTHER"},
	}
	for _, tt := range tests {
		if got := SetName(tt.base, ipfamily.IPv6); got != tt.want || len(got) > maxSetName {
			t.Errorf("SetName(%s, IPv6) = %q, want %q", tt.base, got, tt.want)
		}
		if got := SetName(tt.base, ipfamily.IPv4); got != tt.base {
			t.Errorf("SetName(%s, IPv4) = %q, want it unchanged", tt.base, got)
		}
	}
}

func TestValidateNamesEveryBadField(t *testing.T) {
	cfg := v4Config()
	cfg.MasqueradeBit = 40
	cfg.LocalAddrs = testkit.Addrs("fd00::1")
	cfg.ClusterCIDRs = testkit.Prefixes("fd00::/64")
	_, err := Build(cfg, testkit.Snapshot())
	if err == nil {
		t.Fatal("Build accepted a bad config")
	}
	for _, field := range []string{"MasqueradeBit", "LocalAddrs[0]", "ClusterCIDRs[0]"} {
		if !strings.Contains(err.Error(), field) {
			t.Errorf("error %q does not name %s", err, field)
		}
	}
	if _, err := Build(Config{Family: "IPv5"}, testkit.Snapshot()); err == nil || !strings.Contains(err.Error(), "IPv5") {
		t.Errorf("unknown family: err = %v", err)
	}
}

func TestEntryString(t *testing.T) {
	a, b := netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("198.19.1.1")
	tests := []struct {
		e    Entry
		want string
	}{
		{Entry{Port: 30080}, "30080"},
		{Entry{IP: a}, "198.18.0.1"},
		{Entry{IP: a, Protocol: "TCP", Port: 80}, "198.18.0.1,tcp:80"},
		{Entry{IP: a, Protocol: "SCTP", Port: 80, IP2: b}, "198.18.0.1,sctp:80,198.19.1.1"},
		{Entry{IP: a, Protocol: "UDP", Port: 53, Net: netip.MustParsePrefix("10.0.0.0/8")}, "198.18.0.1,udp:53,10.0.0.0/8"},
		{Entry{IP: netip.MustParseAddr("fd00::1"), Protocol: "TCP", Port: 80}, "fd00::1,tcp:80"},
	}
	for _, tt := range tests {
		if got := tt.e.String(); got != tt.want {
			t.Errorf("String() = %q, want %q", got, tt.want)
		}
	}
}

func TestSourceRangeOfEverythingIsSplit(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		lb    string
		rng   string
		wantN []string
	}{
		{"IPv4", v4Config(), "198.18.9.1", "0.0.0.0/0", []string{"0.0.0.0/1", "128.0.0.0/1"}},
		{"IPv6", v6Config(), "fd00:18::9", "::/0", []string{"::/1", "8000::/1"}},
		{"a narrower range stays whole", v4Config(), "198.18.9.1", "198.19.0.0/16", []string{"198.19.0.0/16"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cluster := "198.18.0.1"
			if tt.cfg.Family == ipfamily.IPv6 {
				cluster = "fd00:18::1"
			}
			st := mustBuild(t, tt.cfg, testkit.Port("d", "a", 80, cluster, testkit.LoadBalancerIPs(tt.lb), testkit.SourceRanges(tt.rng),
				testkit.Endpoints(testkit.EP(netip.AddrPortFrom(tt.cfg.NodeIPs[0], 80).String()))))
			var got []string
			for _, m := range st.Set(SetLBSourceCIDR).Members {
				got = append(got, m.Net.String())
			}
			if !slices.Equal(got, tt.wantN) {
				t.Errorf("%s members' networks = %v, want %v", SetLBSourceCIDR, got, tt.wantN)
			}
		})
	}
}
