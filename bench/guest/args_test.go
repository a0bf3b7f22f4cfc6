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
	got := guestEnv([]string{"PATH=/usr/bin", EnvInGuest + "=0", "X=a b=c"})
	want := []string{"PATH=/usr/bin", "X=a b=c", EnvInGuest + "=1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("guestEnv (-want +got):\n%s", diff)
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
