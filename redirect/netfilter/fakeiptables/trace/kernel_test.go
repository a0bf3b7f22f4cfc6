package trace

import (
	"context"
	"math"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/netfilter/fakeiptables"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// loosen rewrites a canonical dump into equivalent text the kernel prints
// differently: host addresses without /32, MARK's --or-mark and --xor-mark
// forms, shorter probabilities, REJECT without --reject-with.
func loosen(t *testing.T, canonical string) string {
	t.Helper()
	r := strings.NewReplacer(
		"/32 ", " ",
		"--set-xmark 0x4000/0x4000", "--or-mark 0x4000",
		"--set-xmark 0x4000/0x0", "--xor-mark 0x4000",
		"--probability 0.33333333349", "--probability 0.3333333335",
		"--probability 0.50000000000", "--probability 0.5",
		" --reject-with icmp-port-unreachable", "",
	)
	loose := r.Replace(canonical)
	for _, gone := range []string{"/32 ", "--set-xmark", "0.50000000000", "--reject-with"} {
		if strings.Contains(loose, gone) {
			t.Fatalf("loosen left %q in the dump", gone)
		}
	}
	return loose
}

// section is one table of a dump, from "*table" to its COMMIT.
func section(dump, table string) string {
	var b strings.Builder
	in := false
	for _, line := range strings.Split(dump, "\n") {
		switch {
		case line == "*"+table:
			in = true
		case !in || strings.HasPrefix(line, "#"):
			continue
		}
		b.WriteString(line + "\n")
		if line == "COMMIT" {
			break
		}
	}
	return b.String()
}

// TestTracerReadsTheKernelsDump restores the kube-proxy-like ruleset,
// loosened, with iptables-nft-restore in a throwaway namespace, and checks
// that the kernel's dump, the loosened text, and the fake's dump of it all
// trace like the hand-written canonical dump.
func TestTracerReadsTheKernelsDump(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	canonical := loadFile(t, "kube-proxy.save")
	loose := loosen(t, canonical)
	if _, err := (kernel.ExecRunner{}).Run(context.Background(), []byte(loose), "iptables-nft-restore"); err != nil {
		t.Fatalf("restoring the ruleset: %v", err)
	}
	real := lab.WithoutComments(lab.Run(t, "iptables-nft-save"))
	for _, table := range []string{"nat", "filter"} {
		if got, want := section(real, table), section(canonical, table); got != want {
			t.Errorf("the kernel prints the %s table as\n%s\nnot as the hand-written dump\n%s", table, got, want)
		}
	}
	fake := fakeiptables.New(ipfamily.IPv4)
	if _, err := fake.Run(context.Background(), []byte(loose), "iptables-nft-restore"); err != nil {
		t.Fatalf("the fake refused the ruleset: %v", err)
	}
	dumps := map[string]string{"the kernel's dump": real, "the loosened text": loose, "the fake's dump": fake.Save("")}
	for _, tc := range kubeProxyCases() {
		want, err := Run(canonical, tc.pkt, node)
		if err != nil {
			t.Fatal(err)
		}
		for name, d := range dumps {
			got, err := Run(d, tc.pkt, node)
			if err != nil {
				t.Errorf("%s, %s: %v", tc.name, name, err)
				continue
			}
			if !sameOutcome(got, want) {
				t.Errorf("%s: %s traces as\n%s\nthe hand-written dump as\n%s", tc.name, name, got, want)
			}
		}
	}
}

// sameOutcome compares two results path by path, ignoring the rules' text.
func sameOutcome(a, b Result) bool {
	if a.Verdict != b.Verdict || len(a.Paths) != len(b.Paths) {
		return false
	}
	for i := range a.Paths {
		p, q := a.Paths[i], b.Paths[i]
		if p.Verdict != q.Verdict || p.Destination != q.Destination || math.Abs(p.Probability-q.Probability) > 1e-9 ||
			p.Masqueraded != q.Masqueraded || p.Delivered != q.Delivered || p.Translated != q.Translated || p.Mark != q.Mark ||
			len(p.Rules) != len(q.Rules) {
			return false
		}
	}
	return true
}
