package restore

import (
	"context"
	"os/exec"
	"testing"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// The quoting rule is iptables-save's: rules written with it come back from
// the kernel byte for byte, on both backends and families, and split into
// the words written.
func TestQuotingRoundTripsThroughTheKernel(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	comments := []string{"web", "a_b-C9", "ns/svc:port -> 10.0.0.1:80", `it's "x" a\b`, "kubernetes service portals", "x;y=z"}
	for _, be := range []kernel.Backend{kernel.NFT, kernel.Legacy} {
		for _, fam := range []ipfamily.Family{ipfamily.IPv4, ipfamily.IPv6} {
			if _, err := exec.LookPath(be.RestoreCommand(fam)); err != nil {
				t.Errorf("%s not installed", be.RestoreCommand(fam))
				continue
			}
			r, err := NewRunner(fam, be, nil)
			if err != nil {
				t.Fatal(err)
			}
			var specs []string
			for _, c := range comments {
				specs = append(specs, CommentMatch(c)+" -j RETURN")
			}
			p := NewPayload()
			p.WriteChain("filter", "KPROXY-TEXT", specs)
			if err := r.Restore(context.Background(), p.Bytes()); err != nil {
				t.Fatalf("%s %s: %v", be, fam, err)
			}
			save, err := r.Save(context.Background(), "filter")
			if err != nil {
				t.Fatal(err)
			}
			tables, err := ParseSave(save)
			if err != nil {
				t.Fatalf("%s %s: %v\n%s", be, fam, err, save)
			}
			var got []string
			for _, tb := range tables {
				for _, rule := range tb.Rules {
					if rule.Chain != "KPROXY-TEXT" {
						continue
					}
					got = append(got, rule.Spec())
					words, err := rule.Words()
					if err != nil || len(words) != 6 || words[3] != comments[len(got)-1] {
						t.Errorf("%s %s: %q splits into %q, %v", be, fam, rule.Line, words, err)
					}
				}
			}
			if diff := cmp.Diff(specs, got); diff != "" {
				t.Errorf("%s %s: saved rules (-written +saved):\n%s", be, fam, diff)
			}
			p = NewPayload()
			p.Remove("filter", "KPROXY-TEXT")
			if err := r.Restore(context.Background(), p.Bytes()); err != nil {
				t.Fatalf("%s %s: removing the chain: %v", be, fam, err)
			}
		}
	}
}
