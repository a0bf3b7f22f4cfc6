package guest_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes"
	"kproxy.dev/kproxy/sync/mode"
)

// The guest's self-test: what the guest promises its tests. It runs under
// make test-guest and skips on the host.

func TestGuestLoadedTheDefaultModules(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	for _, m := range guest.DefaultModules() {
		if _, err := os.Stat(filepath.Join("/sys/module", m)); err != nil {
			t.Errorf("module %s is not loaded: %v", m, err)
		}
	}
}

func TestGuestHasIPVSAndSCTP(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	ipvs, err := os.ReadFile("/proc/net/ip_vs")
	if err != nil || !strings.HasPrefix(string(ipvs), "IP Virtual Server version") {
		t.Errorf("/proc/net/ip_vs = %.60q, %v; want the IPVS table", ipvs, err)
	}
	for _, family := range []int{unix.AF_INET, unix.AF_INET6} {
		fd, err := unix.Socket(family, unix.SOCK_STREAM, unix.IPPROTO_SCTP)
		if err != nil {
			t.Errorf("SCTP socket (family %d): %v", family, err)
			continue
		}
		unix.Close(fd)
	}
}

// TestGuestKproxyDetectsItsKernel: kproxy's own feature detection finds
// everything the ipvs mode needs and picks the legacy iptables backend by
// itself (the guest kernel has no nf_tables for ip/ip6).
func TestGuestKproxyDetectsItsKernel(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	f := kernel.Detect(context.Background())
	if f.Backend != kernel.Legacy {
		t.Errorf("iptables backend %q (%s), want %q", f.Backend, f.BackendReason, kernel.Legacy)
	}
	for name, s := range map[string]kernel.Support{
		"IPVS": f.IPVS, "SCTP": f.SCTP, "ipset": f.IPSet, "dummy links": f.DummyLinks,
		"conntrack": f.Conntrack, "probe namespace": f.ProbeNetns,
	} {
		if !s.Present {
			t.Errorf("%s not detected: %s", name, s)
		}
	}
	for _, requested := range []string{"", "iptables", "ipvs", "userspace"} {
		if _, reason, err := modes.Choose(requested, f); err != nil {
			t.Errorf("--proxy-mode=%q cannot run in the guest: %v", requested, err)
		} else if requested == "" && !strings.Contains(reason, string(mode.IPTables)) {
			t.Errorf("automatic mode choice: %s; want iptables", reason)
		}
	}
	if t.Failed() {
		t.Logf("detected features:\n%s", f)
	}
}

func TestGuestLegacyIPTablesInANetworkNamespace(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	if lab.InFreshNetns(t) {
		return
	}
	for _, tool := range []string{"iptables-legacy", "ip6tables-legacy"} {
		lab.Run(t, tool, "-w", "-t", "nat", "-N", "KPROXY-GUEST")
		lab.Run(t, tool, "-w", "-t", "nat", "-A", "KPROXY-GUEST", "-p", "tcp", "-m", "comment", "--comment", "self-test", "-j", "REDIRECT", "--to-ports", "9")
		saved := lab.Run(t, tool+"-save", "-t", "nat")
		if want := `-A KPROXY-GUEST -p tcp -m comment --comment self-test -j REDIRECT --to-ports 9`; !strings.Contains(saved, want) {
			t.Errorf("%s-save lacks %q:\n%s", tool, want, saved)
		}
	}
}

func TestGuestMakesNetworkNamespaces(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	out, err := exec.Command("unshare", "-n", "ip", "-o", "link", "show").CombinedOutput()
	if err != nil {
		t.Fatalf("unshare -n ip link: %v\n%s", err, out)
	}
	if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], ": lo:") {
		t.Errorf("a fresh namespace shows links:\n%s\nwant only lo", out)
	}
}

// TestGuestEnvironment: what host tests take for granted.
func TestGuestEnvironment(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	for _, addr := range []string{"127.0.0.1:0", "[::1]:0"} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("loopback %s: %v", addr, err)
			continue
		}
		ln.Close()
	}
	for _, dir := range []string{os.TempDir(), "/run", "/etc"} {
		f, err := os.CreateTemp(dir, "guest-self-test-")
		if err != nil {
			t.Errorf("%s is not writable: %v", dir, err)
			continue
		}
		f.Close()
		os.Remove(f.Name())
	}
	if _, err := os.Stat("doc.go"); err != nil {
		t.Errorf("the test does not run in its package directory: %v", err)
	}
	if out, err := exec.Command("modprobe", "ip_vs_lc").CombinedOutput(); err != nil {
		t.Errorf("a test cannot load a module of its own: %v: %s", err, out)
	}
}
