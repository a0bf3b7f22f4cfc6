package cleanup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/mode"
)

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// nodeState renders everything cleanup may touch, in both backends and
// families, comparable as text: rules (without counters and timestamps),
// ipsets, links and nftables tables.
func nodeState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, fam := range ipfamily.All() {
		for _, be := range kernel.Backends() {
			b.WriteString("## " + be.SaveCommand(fam) + "\n")
			for _, line := range strings.Split(lab.Run(t, be.SaveCommand(fam)), "\n") {
				if line != "" && !strings.HasPrefix(line, "#") {
					b.WriteString(counters.ReplaceAllString(line, "[0:0]") + "\n")
				}
			}
		}
	}
	b.WriteString("## ipset save\n" + lab.Run(t, "ipset", "save"))
	b.WriteString("## links\n")
	for _, line := range strings.Split(strings.TrimSpace(lab.Run(t, "ip", "-o", "link", "show")), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			b.WriteString(f[1] + "\n")
		}
	}
	b.WriteString("## nft list tables\n" + lab.Run(t, "nft", "list", "tables"))
	return b.String()
}

func runRestore(t *testing.T, be kernel.Backend, fam ipfamily.Family, input string) {
	t.Helper()
	cmd := exec.Command(be.RestoreCommand(fam), "--noflush")
	cmd.Stdin = strings.NewReader(input)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s --noflush: %v\n%s\ninput:\n%s", be.RestoreCommand(fam), err, out, input)
	}
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// leftoversOnly returns the fixture minus the lines of kept (per table) and
// minus built-in chain declarations, so restoring it with --noflush adds
// exactly one mode's leftovers to a node already holding kept.
func leftoversOnly(t *testing.T, save, kept string) string {
	t.Helper()
	keptLines := map[string]bool{}
	table := ""
	for _, line := range strings.Split(kept, "\n") {
		if strings.HasPrefix(line, "*") {
			table = line
		}
		keptLines[table+"|"+line] = true
	}
	var b strings.Builder
	table = ""
	for _, line := range strings.Split(save, "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "*"):
			table = line
		case line == "COMMIT":
		case strings.HasPrefix(line, ":") && !strings.Contains(line, " - "):
			continue // built-in chain
		case keptLines[table+"|"+line]:
			continue
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

var ipvsSets = [][]string{
	{"KUBE-LOOP-BACK", "hash:ip,port,ip"},
	{"KUBE-CLUSTER-IP", "hash:ip,port"},
	{"KUBE-LOAD-BALANCER", "hash:ip,port"},
	{"KUBE-NODE-PORT-TCP", "bitmap:port", "range", "0-65535"},
	{"KUBE-HEALTH-CHECK-NODE-PORT", "bitmap:port", "range", "0-65535"},
	{"KUBE-IPVS-IPS", "hash:ip"},
	{"KUBE-6-CLUSTER-IP", "hash:ip,port", "family", "inet6"},
}

func installIPVSSets(t *testing.T) {
	t.Helper()
	for _, s := range ipvsSets {
		lab.Run(t, "ipset", append([]string{"create", s[0]}, s[1:]...)...)
	}
	lab.Run(t, "ipset", "add", "KUBE-CLUSTER-IP", "198.18.0.10,tcp:80")
}

// installKept adds what cleanup must leave alone: kubelet's chains, user
// rules, a user ipset and nftables table.
func installKept(t *testing.T) {
	t.Helper()
	for _, be := range kernel.Backends() {
		runRestore(t, be, ipfamily.IPv4, fixture(t, "kept-v4.save"))
		runRestore(t, be, ipfamily.IPv6, fixture(t, "kept-v6.save"))
	}
	lab.Run(t, "ipset", "create", "user-allow", "hash:net")
	lab.Run(t, "ipset", "add", "user-allow", "198.19.7.0/24")
	lab.Run(t, "nft", "add", "table", "ip", "user-table")
}

// installLeftovers leaves what each mode programs, mixed as on a node that
// switched modes: both v4 backends get several modes' chains, and the nft
// one holds iptables and ipvs mode's shared chains twice over.
func installLeftovers(t *testing.T) {
	t.Helper()
	kept4, kept6 := fixture(t, "kept-v4.save"), fixture(t, "kept-v6.save")
	installIPVSSets(t)
	for _, f := range []string{"iptables-mode.save", "ipvs-mode.save", "userspace-mode.save"} {
		runRestore(t, kernel.NFT, ipfamily.IPv4, leftoversOnly(t, fixture(t, f), kept4))
	}
	for _, f := range []string{"ipvs-mode.save", "userspace-mode.save"} {
		runRestore(t, kernel.Legacy, ipfamily.IPv4, leftoversOnly(t, fixture(t, f), kept4))
	}
	for _, be := range kernel.Backends() {
		runRestore(t, be, ipfamily.IPv6, leftoversOnly(t, fixture(t, "ipv6-iptables-mode.save"), kept6))
	}
	// No dummy driver here; a veth stands in for ipvs mode's dummy link.
	lab.Run(t, "ip", "link", "add", "kube-ipvs0", "type", "veth", "peer", "name", "kipvs-peer")
	lab.Run(t, "nft", "add", "table", "ip", "kube-proxy")
	lab.Run(t, "nft", "add", "table", "ip6", "kube-proxy")
}

func TestCleanupAllOnKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	ctx := context.Background()
	f := kernel.Detect(ctx, false)
	// Neither probing nor cleaning a fresh namespace creates anything in it,
	// not even empty tables.
	assertPristine(t, "after Detect")
	baseline := nodeState(t)
	if err := Clean(ctx, f, keeping("")); err != nil {
		t.Fatalf("cleanup of a clean namespace: %v", err)
	}
	assertPristine(t, "after cleanup of a clean namespace")
	if got := nodeState(t); got != baseline {
		t.Fatalf("cleanup of a clean namespace changed it (-before +after):\n%s", cmp.Diff(baseline, got))
	}

	installKept(t)
	want := nodeState(t)
	installLeftovers(t)
	dirty := nodeState(t)
	for _, s := range []string{"KUBE-SVC-WEBWEBWEBWEBWEB1", "KUBE-PORTALS-HOST", "KUBE-IPVS-FILTER", "KUBE-SEP-V6V6V6V6V6V6V6V6", "create KUBE-CLUSTER-IP", "kube-ipvs0", "table ip6 kube-proxy"} {
		if !strings.Contains(dirty, s) {
			t.Fatalf("leftovers were not installed: no %q in\n%s", s, dirty)
		}
	}

	if err := Clean(ctx, f, keeping("")); err != nil {
		t.Fatalf("cleanup: %v", err)
	}
	if got := nodeState(t); got != want {
		t.Fatalf("after cleanup the node is not baseline + kubelet/user state (-want +got):\n%s", cmp.Diff(want, got))
	}
	if err := Clean(ctx, f, keeping("")); err != nil {
		t.Fatalf("second cleanup: %v", err)
	}
	if got := nodeState(t); got != want {
		t.Fatalf("second cleanup changed the node (-want +got):\n%s", cmp.Diff(want, got))
	}
}

// TestCleanupExceptIPTablesOnKernel switches a node from ipvs to iptables
// mode: ipvs mode's own chains and sets go, the chains both modes share stay
// but lose their ipset matches, and iptables mode's chains stay untouched.
func TestCleanupExceptIPTablesOnKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	ctx := context.Background()
	f := kernel.Detect(ctx, false)
	installKept(t)
	want := nodeState(t)
	kept4 := fixture(t, "kept-v4.save")
	installIPVSSets(t)
	// iptables mode ran first, then ipvs mode: KUBE-SERVICES holds ipvs rules.
	runRestore(t, kernel.NFT, ipfamily.IPv4, leftoversOnly(t, fixture(t, "iptables-mode.save"), kept4))
	runRestore(t, kernel.NFT, ipfamily.IPv4, leftoversOnly(t, fixture(t, "ipvs-mode.save"), kept4))
	lab.Run(t, "ip", "link", "add", "kube-ipvs0", "type", "veth", "peer", "name", "kipvs-peer")

	if err := Clean(ctx, f, keeping(mode.IPTables)); err != nil {
		t.Fatalf("Except(iptables): %v", err)
	}
	got := nodeState(t)
	for _, s := range []string{":KUBE-SVC-WEBWEBWEBWEBWEB1", ":KUBE-SEP-AAAAAAAAAAAAAAAA", "-A KUBE-SVC-WEBWEBWEBWEBWEB1", ":KUBE-SERVICES", ":KUBE-MARK-MASQ", "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES", ":KUBE-PROXY-CANARY", "KUBE-EXTERNAL-SERVICES"} {
		if !strings.Contains(got, s) {
			t.Errorf("iptables mode's %q was removed", s)
		}
	}
	for _, s := range []string{"KUBE-IPVS-FILTER", "KUBE-NODE-PORT", "KUBE-LOAD-BALANCER", "--match-set", "create KUBE-", "kube-ipvs0"} {
		if strings.Contains(got, s) {
			t.Errorf("ipvs mode's %q survived:\n%s", s, got)
		}
	}
	if err := Clean(ctx, f, keeping(mode.IPTables)); err != nil {
		t.Fatalf("second Except(iptables): %v", err)
	}
	if again := nodeState(t); again != got {
		t.Errorf("second Except(iptables) changed the node (-first +second):\n%s", cmp.Diff(got, again))
	}
	if err := Clean(ctx, f, keeping("")); err != nil {
		t.Fatalf("All: %v", err)
	}
	if final := nodeState(t); final != want {
		t.Errorf("after All the node is not baseline + kubelet/user state (-want +got):\n%s", cmp.Diff(want, final))
	}
}

// TestCleanupLegacyLeftovers: an nft-capable node where an earlier proxy
// wrote to legacy. Detect sees the legacy tables (case (b): probed although
// nft works), follows the rules there, and cleanup removes them.
func TestCleanupLegacyLeftovers(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	ctx := context.Background()
	runRestore(t, kernel.Legacy, ipfamily.IPv4, fixture(t, "kept-v4.save"))
	want := nodeState(t)
	runRestore(t, kernel.Legacy, ipfamily.IPv4, leftoversOnly(t, fixture(t, "iptables-mode.save"), fixture(t, "kept-v4.save")))

	f := kernel.Detect(ctx, false)
	if !f.IPv4.NFT.Usable || f.IPv4.Legacy.NotProbed || !f.IPv4.Legacy.Usable || f.Backend != kernel.Legacy {
		t.Fatalf("want nft usable, legacy probed and chosen for its kube rules, got:\n%s", f)
	}
	if err := Clean(ctx, f, keeping("")); err != nil {
		t.Fatalf("All: %v", err)
	}
	if got := nodeState(t); got != want {
		t.Errorf("legacy leftovers survived cleanup (-want +got):\n%s", cmp.Diff(want, got))
	}
}

// assertPristine fails unless the namespace holds what a fresh one does: every
// iptables save prints nothing but comments, no ipset or nftables table
// exists and lo is the only link.
func assertPristine(t *testing.T, when string) {
	t.Helper()
	for _, fam := range ipfamily.All() {
		for _, be := range kernel.Backends() {
			var rules []string
			for _, line := range strings.Split(lab.Run(t, be.SaveCommand(fam)), "\n") {
				if line != "" && !strings.HasPrefix(line, "#") {
					rules = append(rules, line)
				}
			}
			if len(rules) > 0 {
				t.Errorf("%s: %s prints more than comments:\n%s", when, be.SaveCommand(fam), strings.Join(rules, "\n"))
			}
		}
	}
	if sets := strings.TrimSpace(lab.Run(t, "ipset", "list", "-n")); sets != "" {
		t.Errorf("%s: ipsets exist: %s", when, sets)
	}
	if tables := strings.TrimSpace(lab.Run(t, "nft", "list", "tables")); tables != "" {
		t.Errorf("%s: nftables tables exist: %s", when, tables)
	}
	var links []string
	for _, line := range strings.Split(strings.TrimSpace(lab.Run(t, "ip", "-o", "link", "show")), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			links = append(links, strings.TrimSuffix(f[1], ":"))
		}
	}
	if len(links) != 1 || links[0] != "lo" {
		t.Errorf("%s: links %v, want only lo", when, links)
	}
}
