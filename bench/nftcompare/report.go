package nftcompare

import (
	"fmt"
	"regexp"
	"strings"
	"time"
)

// KnownDifference is an intended difference between kube-proxy's table and
// kproxy's: a changed line (as ChangedLines gives it, "-" for kube-proxy
// only, "+" for kproxy only) it explains, and why.
type KnownDifference struct {
	Scenario string         // "" for every scenario
	Family   string         // "ip", "ip6", or "" for both
	Line     *regexp.Regexp // matched against "-line" / "+line"
	Reason   string
}

// Unexplained returns the changed lines between want (kube-proxy) and got
// (kproxy) that no known difference explains.
func Unexplained(scenario, family, want, got string, known []KnownDifference) []string {
	var out []string
	for _, l := range ChangedLines(want, got) {
		explained := false
		for _, k := range known {
			if (k.Scenario == "" || k.Scenario == scenario) && (k.Family == "" || k.Family == family) && k.Line.MatchString(l) {
				explained = true
				break
			}
		}
		if !explained {
			out = append(out, l)
		}
	}
	return out
}

// Result is the outcome of one scenario and family.
type Result struct {
	Scenario, Family string
	// Problem is set when there was nothing to compare (a proxy did not
	// start or never wrote its table).
	Problem string
	// Diff is the unified diff from kube-proxy's normalised table to
	// kproxy's; Unexplained is how many changed lines no known difference
	// explains.
	Diff        string
	Unexplained int
	// SelfDiff is the diff between two kube-proxy runs (must be empty).
	SelfDiff string
}

// Report renders results as the markdown report helpers read: a one-line
// summary with the time first, then each scenario and family.
func Report(results []Result, now time.Time, notes string) string {
	same, differ, problems := 0, 0, 0
	for _, r := range results {
		switch {
		case r.Problem != "":
			problems++
		case r.Unexplained > 0:
			differ++
		default:
			same++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s nftcompare: %d scenario×family identical (or known differences only), %d differ, %d not compared\n\n",
		now.UTC().Format("2006-01-02 15:04:05 UTC"), same, differ, problems)
	if notes != "" {
		b.WriteString(notes + "\n\n")
	}
	b.WriteString("Diffs go from kube-proxy v1.36.3 (`-`) to kproxy (`+`), both `nft list table <family> kube-proxy` after normalisation " +
		"(objects sorted by kind and name, set/map elements sorted one per line, dynamic set contents dropped, " +
		"counters zeroed, empty chains nothing names dropped).\n")
	for _, r := range results {
		fmt.Fprintf(&b, "\n## %s, %s: ", r.Scenario, r.Family)
		switch {
		case r.Problem != "":
			fmt.Fprintf(&b, "not compared\n\n```\n%s\n```\n", strings.TrimSpace(r.Problem))
			if r.Diff != "" {
				b.WriteString("\nkube-proxy's table, against what kproxy left:\n")
			}
		case r.Diff == "":
			b.WriteString("identical\n")
		case r.Unexplained == 0:
			b.WriteString("known differences only\n")
		default:
			fmt.Fprintf(&b, "%d unexplained changed lines\n", r.Unexplained)
		}
		if r.Diff != "" {
			fmt.Fprintf(&b, "\n```diff\n%s```\n", r.Diff)
		}
		if r.SelfDiff != "" {
			fmt.Fprintf(&b, "\nTwo kube-proxy runs differ (harness problem):\n\n```diff\n%s```\n", r.SelfDiff)
		}
	}
	return b.String()
}
