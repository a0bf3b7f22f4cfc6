package kernel

import (
	"context"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/mode"
)

// TestDetectOnThisHost asserts what the CI machine is known to have: both
// iptables backends with REDIRECT, ipset and conntrack, but no IPVS, no SCTP
// sockets and no dummy driver.
func TestDetectOnThisHost(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	before := snapshotNode(t)
	start := time.Now()
	f := Detect(context.Background())
	elapsed := time.Since(start)
	t.Logf("probed in %v:\n%s", elapsed, f)

	for _, fam := range Families() {
		for _, b := range Backends() {
			got := f.Family(fam).Get(b)
			if !got.Usable || !got.DNAT || !got.Redirect {
				t.Errorf("%s: got %s, want usable with DNAT and REDIRECT", b.Command(fam), got)
			}
			if got.KubeRules != 0 {
				t.Errorf("%s: counted %d kube rules in a fresh namespace", b.Command(fam), got.KubeRules)
			}
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

	m, reason, err := Choose("", f)
	if err != nil || m != mode.IPTables {
		t.Errorf("Choose(auto) = %q, %v; want iptables", m, err)
	}
	t.Logf("auto mode: %s (%s)", m, reason)
	if _, _, err := Choose("ipvs", f); err == nil {
		t.Errorf("Choose(ipvs) succeeded on a kernel without IPVS")
	} else {
		t.Logf("ipvs refused: %v", err)
	}
}

// snapshotNode renders the state probes could leave behind: chains of both
// backends and families, ipsets and links. Legacy tables the probe loaded
// are allowed (loading a table is not a leftover), so counters and the
// per-table headers are dropped: only chain and rule lines are compared.
func snapshotNode(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	for _, fam := range Families() {
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
