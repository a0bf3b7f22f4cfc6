package guest

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestKernelArgs(t *testing.T) {
	good := bootPaths{Init: "/work/bin/guest-exec", SharedDir: "/tmp/kproxy-guest-1/shared", UMLDir: "/tmp/kproxy-guest-1"}
	got, err := kernelArgs(good, "512M")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"mem=512M", "root=/dev/root", "rootfstype=hostfs", "rootflags=/", "ro",
		"init=/work/bin/guest-exec",
		"con0=null,fd:3", "con1=null,fd:4", "con2=null,fd:5", "con=null", "ssl=null",
		"uml_dir=/tmp/kproxy-guest-1", "umid=kproxy-guest", "quiet",
		"KPROXY_GUEST_SHARED=/tmp/kproxy-guest-1/shared",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kernel args (-want +got):\n%s", diff)
	}

	for _, tc := range []struct {
		name    string
		paths   bootPaths
		mem     string
		wantErr string
	}{
		{"space in init", bootPaths{"/my bin/guest-exec", good.SharedDir, good.UMLDir}, "512M", `init binary: path "/my bin/guest-exec" contains ' '`},
		{"comma in shared dir", bootPaths{good.Init, "/tmp/a,b/shared", good.UMLDir}, "512M", `shared directory: path "/tmp/a,b/shared" contains ','`},
		{"quote in UML dir", bootPaths{good.Init, good.SharedDir, `/tmp/"x`}, "512M", `UML directory: path "/tmp/\"x" contains '"'`},
		{"relative init", bootPaths{"bin/guest-exec", good.SharedDir, good.UMLDir}, "512M", `init binary: path "bin/guest-exec" is not absolute`},
		{"memory without unit", good, "512", `guest memory "512"`},
		{"memory with option smuggled", good, "512M root=/x", `guest memory "512M root=/x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kernelArgs(tc.paths, tc.mem)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("kernelArgs error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestScale(t *testing.T) {
	for _, tc := range []struct {
		inGuest string
		want    time.Duration
	}{
		{"", 15 * time.Second},
		{"1", 15 * time.Second * Slowdown},
	} {
		t.Setenv(EnvInGuest, tc.inGuest)
		if got := Scale(15 * time.Second); got != tc.want {
			t.Errorf("Scale(15s) with %s=%q = %v, want %v", EnvInGuest, tc.inGuest, got, tc.want)
		}
	}
}

func TestTimeoutFor(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want time.Duration
	}{
		{[]string{"-test.paniconexit0", "-test.timeout=10m0s", "-test.run=X"}, 11 * time.Minute},
		{[]string{"-test.timeout", "90s"}, 90*time.Second + time.Minute},
		{[]string{"--test.timeout=2m"}, 3 * time.Minute},
		{[]string{"-test.timeout=0s"}, DefaultTimeout + time.Minute},
		{[]string{"-test.timeout=bogus"}, DefaultTimeout + time.Minute},
		{[]string{"-test.run", "-test.timeout=5s"}, 5*time.Second + time.Minute},
		{nil, DefaultTimeout + time.Minute},
	} {
		if got := TimeoutFor(tc.args); got != tc.want {
			t.Errorf("TimeoutFor(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}

func TestParseModules(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []string
		wantErr bool
	}{
		{"", nil, false},
		{"ip_vs_lc", []string{"ip_vs_lc"}, false},
		{"ip_vs_lc, xt_ipvs,,nf-conntrack-sip ", []string{"ip_vs_lc", "xt_ipvs", "nf-conntrack-sip"}, false},
		{"-v", nil, true},           // an option for modprobe, not a module
		{"ip_vs;reboot", nil, true}, // not a module name
		{"../../x", nil, true},
	} {
		got, err := ParseModules(tc.in)
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseModules(%q) error = %v, want error %v", tc.in, err, tc.wantErr)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseModules(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestMergeModulesKeepsOrderDropsRepeats(t *testing.T) {
	got := mergeModules([]string{"ip_vs", "sctp"}, []string{"ip_vs_lc", "sctp", "ip_vs_lc"})
	if diff := cmp.Diff([]string{"ip_vs", "sctp", "ip_vs_lc"}, got); diff != "" {
		t.Errorf("mergeModules (-want +got):\n%s", diff)
	}
}

func TestProgramEnvMarksTheGuest(t *testing.T) {
	host := []string{"PATH=/usr/bin", EnvInGuest + "=0", "X=a b=c", EnvNetfilter + "=off"}
	for _, tc := range []struct {
		noNetfilter bool
		want        []string
	}{
		{false, []string{"PATH=/usr/bin", "X=a b=c", EnvInGuest + "=1", EnvNetfilter + "=on"}},
		{true, []string{"PATH=/usr/bin", "X=a b=c", EnvInGuest + "=1", EnvNetfilter + "=off"}},
	} {
		if diff := cmp.Diff(tc.want, guestEnv(host, tc.noNetfilter)); diff != "" {
			t.Errorf("guestEnv(noNetfilter %v) (-want +got):\n%s", tc.noNetfilter, diff)
		}
	}
}

func TestParseNetfilter(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    bool
		wantErr bool
	}{
		{"", true, false}, {"on", true, false}, {"1", true, false}, {"true", true, false},
		{"off", false, false}, {"OFF", false, false}, {" false ", false, false}, {"0", false, false},
		{"none", false, true},
	} {
		got, err := ParseNetfilter(tc.in)
		if got != tc.want || (err != nil) != tc.wantErr {
			t.Errorf("ParseNetfilter(%q) = %v, %v; want %v (error: %v)", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestIsNetfilterModule(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"nf_conntrack", true}, {"nf_nat", true}, {"nf_tables", true}, {"nft_chain_nat", true},
		{"nfnetlink", true}, {"x_tables", true}, {"xt_REDIRECT", true}, {"xt-comment", true},
		{"ip_tables", true}, {"iptable_nat", true}, {"ipt_REJECT", true},
		{"ip6_tables", true}, {"ip6table_nat", true}, {"ip6t_REJECT", true},
		{"arp_tables", true}, {"ebtables", true}, {"ebtable_nat", true}, {"ebt_ip", true},
		{"ip_set", true}, {"ip_set_hash_ip", true}, {"ip_vs", true}, {"ip_vs_rr", true},
		{"br_netfilter", true}, {"bpfilter", true},
		{"ipv6", false}, {"sctp", false}, {"bridge", false}, {"veth", false}, {"dummy", false},
		{"overlay", false}, {"ip6_udp_tunnel", false}, {"libcrc32c", false}, {"ip_gre", false},
	} {
		if got := IsNetfilterModule(tc.name); got != tc.want {
			t.Errorf("IsNetfilterModule(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestNoNetfilterModules: the guest without netfilter loads a subset of
// the default modules, none of them netfilter's.
func TestNoNetfilterModules(t *testing.T) {
	defaults := map[string]bool{}
	for _, m := range DefaultModules() {
		defaults[m] = true
	}
	for _, m := range NoNetfilterModules() {
		if !defaults[m] || IsNetfilterModule(m) {
			t.Errorf("NoNetfilterModules has %s: in DefaultModules %v, netfilter %v", m, defaults[m], IsNetfilterModule(m))
		}
	}
}

func TestModulesToLoad(t *testing.T) {
	withoutNF := []string{"ipv6", "sctp", "hmac", "veth", "bridge", "udp_diag"}
	for _, tc := range []struct {
		name        string
		extra       []string
		noNetfilter bool
		want        []string
		wantErr     string
	}{
		{name: "default", want: DefaultModules()},
		{name: "default and extra", extra: []string{"ip_vs_lc", "sctp"}, want: append(DefaultModules(), "ip_vs_lc")},
		{name: "without netfilter", noNetfilter: true, want: withoutNF},
		{name: "without netfilter and extra", extra: []string{"vxlan"}, noNetfilter: true, want: append(withoutNF, "vxlan")},
		{name: "without netfilter but asked for some", extra: []string{"vxlan", "xt_comment"}, noNetfilter: true,
			wantErr: "module xt_comment is part of netfilter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := guestModules(tc.extra, tc.noNetfilter)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("guestModules = %v, %v; want an error saying %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("guestModules (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatStateAndGroup(t *testing.T) {
	for _, tc := range []struct {
		stat      string
		wantState string
		wantGroup int
		wantOK    bool
	}{
		{"4242 (linux.uml) S 1 4242 4242 0 -1 4194560", "S", 4242, true},
		{"17 (a) b) (c) Z 4242 4243 4242 0", "Z", 4243, true},
		{"17 (x y) R 1", "", 0, false},
		{"garbage", "", 0, false},
		{"17 (x) R 1 notanumber 3", "", 0, false},
	} {
		state, group, ok := statStateAndGroup(tc.stat)
		if state != tc.wantState || group != tc.wantGroup || ok != tc.wantOK {
			t.Errorf("statStateAndGroup(%q) = %q, %d, %v; want %q, %d, %v", tc.stat, state, group, ok, tc.wantState, tc.wantGroup, tc.wantOK)
		}
	}
}
