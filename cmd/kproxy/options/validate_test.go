package options

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/sync/mode"
)

func TestInvalidFlagsNameTheFlag(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"unknown proxy mode", []string{"--proxy-mode=foo"}, `invalid value "foo" for --proxy-mode: must be one of userspace, iptables, ipvs, nftables`},
		{"nftables masquerade bit", []string{"--nftables-masquerade-bit=32"}, `invalid value "32" for --nftables-masquerade-bit: must be within [0, 31]`},
		{"bind address not an IP", []string{"--bind-address=node1"}, `invalid value "node1" for --bind-address: must be an IP address`},
		{"healthz host not an IP", []string{"--healthz-bind-address=localhost:10256"}, `invalid value "localhost:10256" for --healthz-bind-address: "localhost" is not an IP address`},
		{"healthz port out of range", []string{"--healthz-bind-address=0.0.0.0:70000"}, `invalid value "0.0.0.0:70000" for --healthz-bind-address: port "70000" must be a number within [1, 65535]`},
		{"metrics port negative", []string{"--metrics-bind-address=127.0.0.1:-1"}, `invalid value "127.0.0.1:-1" for --metrics-bind-address: port "-1" must be a number`},
		{"metrics garbage", []string{"--metrics-bind-address=:::"}, `invalid value ":::" for --metrics-bind-address: must be an IP address and port`},
		{"masquerade bit too big", []string{"--iptables-masquerade-bit=32"}, `invalid value "32" for --iptables-masquerade-bit: must be within [0, 31]`},
		{"masquerade bit negative", []string{"--iptables-masquerade-bit=-1"}, `invalid value "-1" for --iptables-masquerade-bit`},
		{"iptables sync zero", []string{"--iptables-sync-period=0"}, `invalid value "0s" for --iptables-sync-period: must be greater than 0`},
		{"iptables min sync negative", []string{"--iptables-min-sync-period=-1s"}, `invalid value "-1s" for --iptables-min-sync-period: must be greater than or equal to 0`},
		{"iptables min above sync", []string{"--iptables-sync-period=10s", "--iptables-min-sync-period=11s"}, `invalid value "11s" for --iptables-min-sync-period: must not be greater than --iptables-sync-period (10s)`},
		{"ipvs sync negative", []string{"--ipvs-sync-period=-5s"}, `invalid value "-5s" for --ipvs-sync-period: must be greater than 0`},
		{"ipvs min above sync", []string{"--ipvs-min-sync-period=1m"}, `invalid value "1m0s" for --ipvs-min-sync-period: must not be greater than --ipvs-sync-period (30s)`},
		{"ipvs scheduler", []string{"--ipvs-scheduler=fastest"}, `invalid value "fastest" for --ipvs-scheduler: must be one of rr, wrr, lc, wlc, lblc, lblcr, sh, dh, sed, nq, mh`},
		{"ipvs exclude cidr", []string{"--ipvs-exclude-cidrs=198.18.0.0/16,nope"}, `invalid value "nope" for --ipvs-exclude-cidrs: must be a CIDR`},
		{"ipvs tcp timeout negative", []string{"--ipvs-tcp-timeout=-1s"}, `invalid value "-1s" for --ipvs-tcp-timeout`},
		{"conntrack max negative", []string{"--conntrack-max-per-core=-1"}, `invalid value "-1" for --conntrack-max-per-core: must be greater than or equal to 0`},
		{"conntrack min negative", []string{"--conntrack-min=-5"}, `invalid value "-5" for --conntrack-min`},
		{"conntrack established negative", []string{"--conntrack-tcp-timeout-established=-1h"}, `invalid value "-1h0m0s" for --conntrack-tcp-timeout-established`},
		{"conntrack close wait negative", []string{"--conntrack-tcp-timeout-close-wait=-1s"}, `for --conntrack-tcp-timeout-close-wait`},
		{"conntrack udp negative", []string{"--conntrack-udp-timeout=-1s"}, `for --conntrack-udp-timeout:`},
		{"conntrack udp stream negative", []string{"--conntrack-udp-timeout-stream=-1s"}, `for --conntrack-udp-timeout-stream:`},
		{"cluster cidr not a cidr", []string{"--cluster-cidr=198.19.0.0"}, `invalid value "198.19.0.0" for --cluster-cidr: must be a CIDR`},
		{"cluster cidr same family twice", []string{"--cluster-cidr=198.19.0.0/16,198.20.0.0/16"}, `invalid value "198.19.0.0/16,198.20.0.0/16" for --cluster-cidr: a pair must hold one IPv4 and one IPv6 CIDR`},
		{"cluster cidr three", []string{"--cluster-cidr=198.19.0.0/16,fd00::/64,198.20.0.0/16"}, `for --cluster-cidr: must be one CIDR or a dual-stack pair`},
		{"nodeport bad cidr", []string{"--nodeport-addresses=198.19.0.0/33"}, `invalid value "198.19.0.0/33" for --nodeport-addresses: must be a CIDR`},
		{"nodeport primary with cidr", []string{"--nodeport-addresses=primary,198.19.0.0/16"}, `invalid value "primary,198.19.0.0/16" for --nodeport-addresses: 'primary' cannot be combined with CIDRs`},
		{"port range reversed", []string{"--proxy-port-range=3000-2000"}, `invalid value "3000-2000" for --proxy-port-range: last port 2000 is below first port 3000`},
		{"port range too high", []string{"--proxy-port-range=1000-70000"}, `invalid value "1000-70000" for --proxy-port-range: must be empty, a port, lo-hi or lo+n with ports within [0, 65535]`},
		{"port range plus overflow", []string{"--proxy-port-range=65000+1000"}, `invalid value "65000+1000" for --proxy-port-range: ends at 66000, beyond 65535`},
		{"port range garbage", []string{"--proxy-port-range=a-b"}, `for --proxy-port-range: must be empty, a port, lo-hi or lo+n`},
		{"port range both separators", []string{"--proxy-port-range=1-2+3"}, `invalid value "1-2+3" for --proxy-port-range: must be empty, a port, lo-hi or lo+n`},
		{"udp timeout zero", []string{"--udp-timeout=0"}, `invalid value "0s" for --udp-timeout: must be greater than 0`},
		{"unknown portal kind", []string{"--userspace-portals=nat"}, `invalid value "nat" for --userspace-portals: must be one of auto, redirect, local, sklookup`},
		{"qps negative", []string{"--kube-api-qps=-1"}, `invalid value "-1" for --kube-api-qps`},
		{"burst negative", []string{"--kube-api-burst=-1"}, `invalid value "-1" for --kube-api-burst: must be greater than or equal to 0`},
		{"config sync negative", []string{"--config-sync-period=-1m"}, `invalid value "-1m0s" for --config-sync-period: must be greater than or equal to 0`},
		{"services file missing", []string{"--services-file=/nonexistent/kproxy/services.yaml"}, `invalid value "/nonexistent/kproxy/services.yaml" for --services-file: stat /nonexistent/kproxy/services.yaml: no such file or directory`},
		{"services file and kubeconfig", []string{"--services-file=.", "--kubeconfig=/etc/kubeconfig"}, `--services-file and --kubeconfig are mutually exclusive`},
		{"services file and master", []string{"--services-file=.", "--master=https://198.19.0.1:6443"}, `--services-file and --master are mutually exclusive`},
		{"oom score", []string{"--oom-score-adj=-1001"}, `invalid value "-1001" for --oom-score-adj: must be within [-1000, 1000]`},
		{"detect local mode", []string{"--detect-local-mode=Magic"}, `invalid value "Magic" for --detect-local-mode: must be one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix`},
		{"bridge mode needs interface", []string{"--detect-local-mode=BridgeInterface"}, `invalid value "BridgeInterface" for --detect-local-mode: needs --pod-bridge-interface`},
		{"hidden metrics version", []string{"--show-hidden-metrics-for-version=latest"}, `invalid value "latest" for --show-hidden-metrics-for-version`},
		{"blank hostname override", []string{"--hostname-override=  "}, `invalid value "  " for --hostname-override: must not be blank`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := complete(t, tc.args...)
			if err == nil {
				t.Fatalf("args %q accepted (config %+v), want error %q", tc.args, cfg, tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("args %q:\n got error %q\nwant it to contain %q", tc.args, err, tc.want)
			}
		})
	}
}

func TestInvalidFlagTypesAreRejectedAtParse(t *testing.T) {
	for _, args := range [][]string{
		{"--iptables-sync-period=soon"},
		{"--conntrack-min=lots"},
		{"--feature-gates=Foo=maybe"},
		{"--feature-gates=Foo"},
		{"--masquerade-all=perhaps"},
	} {
		if _, _, err := parsed(t, args...); err == nil || !strings.Contains(err.Error(), strings.SplitN(args[0], "=", 2)[0]) {
			t.Errorf("args %q: got %v, want a parse error naming the flag", args, err)
		}
	}
}

func TestAllErrorsAreReportedTogether(t *testing.T) {
	_, err := complete(t, "--proxy-mode=foo", "--iptables-masquerade-bit=99", "--udp-timeout=-1s", "--ipvs-scheduler=x")
	if err == nil {
		t.Fatal("want errors")
	}
	for _, flag := range []string{"--proxy-mode", "--iptables-masquerade-bit", "--udp-timeout", "--ipvs-scheduler"} {
		if !strings.Contains(err.Error(), flag) {
			t.Errorf("error does not mention %s:\n%v", flag, err)
		}
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != 4 {
		t.Errorf("got %d error lines, want 4:\n%v", n, err)
	}
}

func TestValidValuesResolve(t *testing.T) {
	cfg := mustComplete(t,
		"--proxy-mode=ipvs",
		"--bind-address=198.19.0.10",
		"--healthz-bind-address=198.19.0.10",
		"--metrics-bind-address=[fd00::1]:9999",
		"--cluster-cidr=198.19.0.0/16, fd00::/64",
		"--nodeport-addresses=198.19.0.0/24,fd00::/120",
		"--ipvs-exclude-cidrs=198.18.5.1/24",
		"--ipvs-scheduler=wlc",
		"--proxy-port-range=30000+99",
		"--udp-timeout=2s",
		"--iptables-min-sync-period=0",
		"--config-sync-period=0",
		"--feature-gates=LoggingAlphaOptions=true,ComponentFlagz=false",
		"--hostname-override=  Worker-7 ",
		"--services-file=.",
	)
	checks := []struct {
		name      string
		got, want any
	}{
		{"mode", cfg.Mode, mode.IPVS},
		{"bind", cfg.BindAddress, netip.MustParseAddr("198.19.0.10")},
		{"healthz gets default port", cfg.HealthzBindAddress, "198.19.0.10:10256"},
		{"metrics", cfg.MetricsBindAddress, "[fd00::1]:9999"},
		{"cluster cidrs", cfg.ClusterCIDRs, []netip.Prefix{netip.MustParsePrefix("198.19.0.0/16"), netip.MustParsePrefix("fd00::/64")}},
		{"nodeport", cfg.NodePortAddresses, []netip.Prefix{netip.MustParsePrefix("198.19.0.0/24"), netip.MustParsePrefix("fd00::/120")}},
		{"exclude cidrs are masked", cfg.IPVSExcludeCIDRs, []netip.Prefix{netip.MustParsePrefix("198.18.5.0/24")}},
		{"scheduler", cfg.IPVSScheduler, "wlc"},
		{"port range", cfg.PortRange, PortRange{Base: 30000, Size: 100}},
		{"udp", cfg.UDPIdleTimeout, 2 * time.Second},
		{"min sync", cfg.IPTablesMinSyncPeriod, time.Duration(0)},
		{"config sync", cfg.ConfigSyncPeriod, time.Duration(0)},
		{"gates", cfg.FeatureGates, map[string]bool{"LoggingAlphaOptions": true, "ComponentFlagz": false}},
		{"node", cfg.NodeName, "worker-7"},
		{"services file", cfg.ServicesFile, "."},
	}
	for _, c := range checks {
		if !equal(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}

// TestNFTablesSettingsAsKubeProxy: kube-proxy 1.36 has no nftables flags;
// its nftables mode takes --iptables-(min-)sync-period and --masquerade-all,
// nftables.masqueradeBit (not --iptables-masquerade-bit), and NodePorts on
// the primary IPs unless --nodeport-addresses says otherwise. kproxy's own
// nftables-* flags win over the iptables ones.
func TestNFTablesSettingsAsKubeProxy(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want func(c *Config) []string
	}{
		{"defaults", []string{"--proxy-mode=nftables"}, func(c *Config) []string {
			return check(c.NFTablesSyncPeriod == 30*time.Second && c.NFTablesMinSyncPeriod == time.Second && c.NFTablesMasqueradeBit == 14 &&
				c.NodePortPrimary && !c.MasqueradeAll, "defaults 30s/1s/14, primary NodePorts")
		}},
		{"iptables sync flags apply", []string{"--proxy-mode=nftables", "--iptables-sync-period=1m", "--iptables-min-sync-period=0", "--masquerade-all", "--iptables-masquerade-bit=3"}, func(c *Config) []string {
			return check(c.NFTablesSyncPeriod == time.Minute && c.NFTablesMinSyncPeriod == 0 && c.MasqueradeAll && c.NFTablesMasqueradeBit == 14,
				"1m, 0, masquerade all, bit still 14")
		}},
		{"nftables flags win", []string{"--proxy-mode=nftables", "--iptables-sync-period=1m", "--nftables-sync-period=2m", "--nftables-masquerade-bit=5"}, func(c *Config) []string {
			return check(c.NFTablesSyncPeriod == 2*time.Minute && c.NFTablesMasqueradeBit == 5, "2m, bit 5")
		}},
		{"explicit nodeport addresses stay", []string{"--proxy-mode=nftables", "--nodeport-addresses=198.19.0.0/16"}, func(c *Config) []string {
			return check(!c.NodePortPrimary && len(c.NodePortAddresses) == 1, "the given CIDR")
		}},
		{"other modes keep all addresses", []string{"--proxy-mode=iptables"}, func(c *Config) []string {
			return check(!c.NodePortPrimary && len(c.NodePortAddresses) == 0, "all local addresses")
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := mustComplete(t, tc.args...)
			for _, problem := range tc.want(cfg) {
				t.Errorf("%s: %+v", problem, cfg)
			}
		})
	}
}

func check(ok bool, want string) []string {
	if ok {
		return nil
	}
	return []string{"want " + want}
}

func TestPrimaryNodePortAddresses(t *testing.T) {
	cfg := mustComplete(t, "--nodeport-addresses=primary")
	if !cfg.NodePortPrimary || len(cfg.NodePortAddresses) != 0 {
		t.Errorf("NodePortPrimary=%v NodePortAddresses=%v, want true and none", cfg.NodePortPrimary, cfg.NodePortAddresses)
	}
}

func TestPortRangeForms(t *testing.T) {
	tests := []struct {
		in   string
		want PortRange
	}{
		{"", PortRange{}},
		{"0-0", PortRange{}},
		{"0", PortRange{}},
		{"8080", PortRange{Base: 8080, Size: 1}},
		{"30000-32767", PortRange{Base: 30000, Size: 2768}},
		{" 100+0 ", PortRange{Base: 100, Size: 1}},
		{"0-65535", PortRange{Base: 0, Size: 65536}},
	}
	for _, tc := range tests {
		cfg, err := complete(t, "--proxy-port-range="+tc.in)
		if err != nil {
			t.Errorf("%q: %v", tc.in, err)
			continue
		}
		if cfg.PortRange != tc.want {
			t.Errorf("%q: got %+v, want %+v", tc.in, cfg.PortRange, tc.want)
		}
	}
	if got := (PortRange{Base: 30000, Size: 2768}).Last(); got != 32767 {
		t.Errorf("Last() = %d, want 32767", got)
	}
}

func TestNodeNameFallsBackToLowercasedHostname(t *testing.T) {
	if got := mustComplete(t).NodeName; got != "node-a.example" {
		t.Errorf("node name %q, want the OS hostname lowercased", got)
	}
	path := writeTemp(t, "c.yaml", header+"hostnameOverride: From-File\n")
	if got := mustComplete(t, "--config", path).NodeName; got != "from-file" {
		t.Errorf("node name %q, want the file's hostnameOverride lowercased", got)
	}
	if got := mustComplete(t, "--config", path, "--hostname-override=Flag").NodeName; got != "flag" {
		t.Errorf("node name %q, want the flag", got)
	}
}

func TestServerAddresses(t *testing.T) {
	tests := []struct {
		args             []string
		healthz, metrics string
	}{
		{[]string{"--healthz-bind-address=", "--metrics-bind-address="}, "", ""},
		{[]string{"--healthz-port=0", "--metrics-port=0"}, "", ""},
		{[]string{"--healthz-bind-address=198.19.0.1:0"}, "", "127.0.0.1:10249"},
		{[]string{"--healthz-port=9999", "--metrics-port=9998"}, "0.0.0.0:9999", "127.0.0.1:9998"},
		{[]string{"--healthz-bind-address=198.19.0.1", "--healthz-port=81"}, "198.19.0.1:81", "127.0.0.1:10249"},
		{[]string{"--metrics-bind-address=fd00::2"}, "0.0.0.0:10256", "[fd00::2]:10249"},
	}
	for _, tc := range tests {
		cfg := mustComplete(t, tc.args...)
		if cfg.HealthzBindAddress != tc.healthz || cfg.MetricsBindAddress != tc.metrics {
			t.Errorf("%q: healthz %q metrics %q, want %q and %q", tc.args, cfg.HealthzBindAddress, cfg.MetricsBindAddress, tc.healthz, tc.metrics)
		}
	}
}
