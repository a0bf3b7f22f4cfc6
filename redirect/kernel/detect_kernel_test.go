package kernel

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// legacyTableNames reads the legacy tables the kernel has registered in this
// namespace for each family (what iptables-legacy-save reads).
func legacyTableNames(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, name := range []string{"/proc/net/ip_tables_names", "/proc/net/ip6_tables_names"} {
		data, err := os.ReadFile(name)
		if err != nil && !os.IsNotExist(err) { // absent until the module loads
			t.Fatalf("reading legacy table names: %v", err)
		}
		if len(data) > 0 {
			b.WriteString(name + ": " + strings.Join(strings.Fields(string(data)), " ") + "\n")
		}
	}
	return b.String()
}

// TestDetectOnThisHost asserts what the CI machine is known to have: nft
// iptables with REDIRECT, ipset, conntrack and sk_lookup, but no IPVS, no
// SCTP sockets and no dummy driver; that on this nft node, without legacy tables,
// detection leaves the legacy backend alone; and that probing leaves the
// namespace exactly as it was: no table in either backend or family (the
// probes create theirs in a throwaway namespace), no set, no link but lo.
func TestDetectOnThisHost(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	if names := legacyTableNames(t); names != "" {
		t.Fatalf("a fresh namespace already has legacy tables:\n%s", names)
	}
	before := snapshotNode(t)
	start := time.Now()
	f := Detect(context.Background(), true)
	elapsed := time.Since(start)
	t.Logf("probed in %v:\n%s", elapsed, f)

	for _, fam := range ipfamily.All() {
		got := f.Family(fam).NFT
		if !got.Usable || !got.DNAT || !got.Redirect {
			t.Errorf("%s: got %s, want usable with DNAT and REDIRECT", NFT.Command(fam), got)
		}
		legacy := f.Family(fam).Legacy
		if !legacy.NotProbed || legacy.Usable || legacy.Problem != LegacyNotProbed {
			t.Errorf("%s: got %+v, want not probed (%s)", Legacy.Command(fam), legacy, LegacyNotProbed)
		}
		for _, b := range Backends() {
			if n := f.Family(fam).Get(b).KubeRules; n != 0 {
				t.Errorf("%s: counted %d kube rules in a fresh namespace", b.Command(fam), n)
			}
		}
	}
	if names := legacyTableNames(t); names != "" {
		t.Errorf("Detect registered legacy tables on an nft node:\n%s", names)
	}
	if !f.ProbeNetns.Present {
		t.Errorf("probes did not run in a throwaway namespace: %s", f.ProbeNetns)
	}
	assertPristine(t)
	for _, fam := range ipfamily.All() {
		if out := lab.Run(t, NFT.SaveCommand(fam)); strings.Contains(out, "legacy tables present") {
			t.Errorf("%s warns after Detect:\n%s", NFT.SaveCommand(fam), out)
		}
	}
	if f.Backend != NFT {
		t.Errorf("backend = %q (%s), want nft on a node without kube rules", f.Backend, f.BackendReason)
	}
	want := map[string]struct {
		got  Support
		want bool
	}{
		"conntrack": {f.Conntrack, true},
		"ipset":     {f.IPSet, true},
		"ipvs":      {f.IPVS, false},
		"sctp":      {f.SCTP, false},
		"dummy":     {f.DummyLinks, false},
		"sk_lookup": {f.SKLookup, true},
	}
	for name, c := range want {
		if c.got.Present != c.want {
			t.Errorf("%s: got %s, want present=%t", name, c.got, c.want)
		}
	}
	if !strings.Contains(f.IPVS.Detail, `no generic netlink family "IPVS"`) {
		t.Errorf("ipvs detail = %q, want it to say the genetlink family is missing", f.IPVS.Detail)
	}

	if after := snapshotNode(t); after != before {
		t.Errorf("probes left something behind:\nbefore:\n%s\nafter:\n%s", before, after)
	}

	// For another mode nothing of the IPVS mode's is loaded: ipset (built
	// into this kernel) counts as loaded, IPVS and dummy links go unprobed.
	g := Detect(context.Background(), false)
	if g.IPVS.Present || g.IPVS.Detail != notForIPVS || g.DummyLinks.Present || g.DummyLinks.Detail != notForIPVS || !g.IPSet.Present {
		t.Errorf("detection for another mode: ipvs %s, dummy links %s, ipset %s; want IPVS and dummy links not probed, ipset loaded",
			g.IPVS, g.DummyLinks, g.IPSet)
	}
}

// TestDetectProbesExistingLegacyTables: once something registered a legacy
// table (here an IPv4 iptables-legacy -L), nft is still usable but legacy
// leftovers may exist, so detection probes legacy for that family (making
// cleanup read it) and still leaves the other family's legacy alone.
func TestDetectProbesExistingLegacyTables(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	lab.Run(t, "iptables-legacy", "-w", lockWait, "-t", "filter", "-L", "-n")
	f := Detect(context.Background(), false)
	t.Logf("features:\n%s", f)
	if got := f.IPv4.Legacy; got.NotProbed || !got.Usable || !got.DNAT || !got.Redirect {
		t.Errorf("iptables-legacy = %s, want probed, usable with DNAT and REDIRECT", got)
	}
	if got := f.IPv6.Legacy; !got.NotProbed {
		t.Errorf("ip6tables-legacy = %s, want not probed", got)
	}
	if f.Backend != NFT {
		t.Errorf("backend = %q (%s), want nft: legacy tables without kube rules do not decide", f.Backend, f.BackendReason)
	}
	if names := legacyTableNames(t); strings.Contains(names, "ip6_tables_names") {
		t.Errorf("Detect registered IPv6 legacy tables:\n%s", names)
	}
}

// snapshotNode renders the state probes could leave behind: chains of both
// backends and families, ipsets and links. Counters and built-in chains are
// dropped: only user chain and rule lines are compared. (Legacy tables Detect
// must not register are checked separately, via /proc.)
func snapshotNode(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, fam := range ipfamily.All() {
		for _, be := range Backends() {
			for _, line := range strings.Split(lab.Run(t, be.SaveCommand(fam)), "\n") {
				if strings.HasPrefix(line, "-A ") || (strings.HasPrefix(line, ":") && !strings.Contains(line, " ACCEPT ")) {
					b.WriteString(be.Command(fam) + " " + line + "\n")
				}
			}
		}
	}
	b.WriteString(lab.Run(t, "ipset", "list", "-n"))
	b.WriteString(lab.Run(t, "ip", "-o", "link", "show"))
	return b.String()
}

// assertPristine fails unless the namespace holds what a fresh one does: every
// iptables save prints nothing but comments, no ipset exists and lo is the
// only link.
func assertPristine(t *testing.T) {
	t.Helper()
	for _, fam := range ipfamily.All() {
		for _, b := range Backends() {
			var rules []string
			for _, line := range strings.Split(lab.Run(t, b.SaveCommand(fam)), "\n") {
				if line != "" && !strings.HasPrefix(line, "#") {
					rules = append(rules, line)
				}
			}
			if len(rules) > 0 {
				t.Errorf("%s prints more than comments in a namespace that should have no tables:\n%s", b.SaveCommand(fam), strings.Join(rules, "\n"))
			}
		}
	}
	if sets := strings.TrimSpace(lab.Run(t, "ipset", "list", "-n")); sets != "" {
		t.Errorf("ipsets exist: %s", sets)
	}
	var links []string
	for _, line := range strings.Split(strings.TrimSpace(lab.Run(t, "ip", "-o", "link", "show")), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			links = append(links, strings.TrimSuffix(f[1], ":"))
		}
	}
	if len(links) != 1 || links[0] != "lo" {
		t.Errorf("links %v, want only lo", links)
	}
}

// TestThreadSandbox: commands started and netlink calls made inside Do land
// in a namespace of their own, which is gone afterwards; the caller's
// namespace is untouched. (No dummy driver here, so a veth pair and an
// iptables table stand in for the probes' objects.)
func TestThreadSandbox(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	var cmdErr, lookupErr error
	var inside []byte
	err := ThreadSandbox{}.Do(func() {
		ctx := context.Background()
		if _, cmdErr = (ExecRunner{}).Run(ctx, []byte("*nat\n:KPROXY-PROBE - [0:0]\nCOMMIT\n"), "iptables-nft-restore", "--noflush"); cmdErr != nil {
			return
		}
		if _, cmdErr = (ExecRunner{}).Run(ctx, nil, "ip", "link", "add", "kp-sbx0", "type", "veth", "peer", "name", "kp-sbx1"); cmdErr != nil {
			return
		}
		inside, cmdErr = (ExecRunner{}).Run(ctx, nil, "iptables-nft-save", "-t", "nat")
		// A netlink socket opened here must see the link the command made.
		lookupErr = NetlinkSystem{}.DeleteLink("kp-sbx0")
	})
	if err != nil {
		t.Fatalf("Do: %v", err)
	}
	if cmdErr != nil {
		t.Fatalf("command inside the sandbox: %v", cmdErr)
	}
	if !strings.Contains(string(inside), ":KPROXY-PROBE") {
		t.Errorf("iptables-nft-save inside the sandbox does not show the chain made there:\n%s", inside)
	}
	if lookupErr != nil {
		t.Errorf("netlink inside the sandbox does not see the link a command made there: %v", lookupErr)
	}
	assertPristine(t)
}

// BenchmarkDetect measures a whole probe run, throwaway namespace included;
// kproxy pays it once at every start.
func BenchmarkDetect(b *testing.B) {
	if lab.InFreshNetns(b) {
		return
	}
	for b.Loop() {
		if f := Detect(context.Background(), false); !f.ProbeNetns.Present {
			b.Fatalf("probes ran in place: %s", f.ProbeNetns)
		}
	}
}

// TestDetectIPv6Disabled: with IPv6 disabled in the node's namespace (as on
// nodes booted with it off), IPv6 iptables is reported unusable, naming the
// sysctl, and IPv4 is unaffected.
func TestDetectIPv6Disabled(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/disable_ipv6", []byte("1"), 0o644); err != nil {
		t.Fatalf("disabling IPv6 in the test's namespace: %v", err)
	}
	f := Detect(context.Background(), false)
	for _, b := range Backends() {
		if got := f.IPv6.Get(b); got.Usable || !strings.Contains(got.Problem, "disable_ipv6=1") {
			t.Errorf("%s: got %s, want unusable because IPv6 is disabled", b.Command(ipfamily.IPv6), got)
		}
	}
	if !f.IPv4.Get(f.Backend).Usable {
		t.Errorf("IPv4 unusable with IPv6 disabled:\n%s", f)
	}
}
