package syncscale

import (
	"fmt"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"
)

// Target is a row's goal for kproxy; a zero duration means none there.
type Target struct {
	FullSync time.Duration
	Change   time.Duration
	NPL      time.Duration
	// Ahead: kproxy must beat kube-proxy on every timing of the row.
	Ahead bool
}

// TargetFor returns the targets a row of n services in mode m is held to.
// The targets: the iptables modes' at 5,000 services (full sync ≤ 10 s,
// network programming ≤ 1 s) and 30,000 (network programming ≤ 2 s);
// the nftables mode's at 30,000 (full sync ≤ 10 s, one change in
// the kernel ≤ 0.1 s, a new service answering ≤ 0.3 s, ahead of kube-proxy
// on every row). A smaller size is held to the next larger size's target,
// as every cost grows with the service count.
func TargetFor(m Mode, n int) Target {
	var t Target
	if m == NFTables {
		if n <= 30000 {
			t = Target{FullSync: 10 * time.Second, Change: 100 * time.Millisecond, NPL: 300 * time.Millisecond}
		}
		t.Ahead = true
		return t
	}
	if n <= 5000 {
		t.FullSync = 10 * time.Second
		t.NPL = time.Second
	} else if n <= 30000 {
		t.NPL = 2 * time.Second
	}
	return t
}

// Table is a run's rows, rendered as Markdown.
type Table struct {
	// Header lines go above the table, Notes below it.
	Header, Notes []string
	// Specs are the rows asked for, in display order; Results holds those
	// that finished, by RowSpec.Name. A row without a result is shown as
	// failed, never left out.
	Specs   []RowSpec
	Results map[string]Row
}

// tableColumns are the table's headings after the row's mode and size:
// each measurement as kproxy, kube-proxy and their ratio.
var tableColumns = []string{"mode", "service ports", "rules", "rule dump",
	"first full sync: kproxy", "kube-proxy", "kube-proxy ÷ kproxy",
	"one change in kernel: kproxy", "kube-proxy", "kube-proxy ÷ kproxy",
	"new service answers (p50): kproxy", "kube-proxy", "kube-proxy ÷ kproxy",
	"RSS after first sync (peak): kproxy", "kube-proxy", "kube-proxy ÷ kproxy"}

// Markdown renders the header, the table and the notes.
func (t *Table) Markdown() string {
	tab := benchtable.Table{Header: tableColumns}
	for _, spec := range t.Specs {
		r, ok := t.Results[spec.Name()]
		if !ok {
			row := []string{string(spec.Mode), benchtable.Thousands(spec.Services), "failed: see the benchmark log"}
			for len(row) < len(tableColumns) {
				row = append(row, "—")
			}
			tab.Rows = append(tab.Rows, row)
			continue
		}
		tab.Rows = append(tab.Rows, t.row(r))
	}
	return benchtable.Page(t.Header, tab.Markdown(), t.Notes)
}

// side is one proxy's numbers in a row, or that it did not run.
type side struct {
	Measured
	ran bool
}

// measured says whether the side's numbers past the first sync exist.
func (s side) measured() bool { return s.ran && !s.OverBudget }

func (t *Table) row(r Row) []string {
	km, kran := r.Proxies[Kproxy]
	kpm, kpran := r.Proxies[KubeProxy]
	k, kp := side{km, kran}, side{kpm, kpran}
	target := TargetFor(r.Spec.Mode, r.Spec.Services)
	if !k.ran {
		target = Target{} // nothing of kproxy's to judge
	}
	cells := []string{string(r.Spec.Mode), benchtable.Thousands(r.Spec.Services), ruleCount(k, kp), dumpSize(k, kp)}
	cells = append(cells,
		withTarget(fullSync(k), k.measured(), k.FullSync, target.FullSync), fullSync(kp),
		ratio(target, k, kp, func(m Measured) time.Duration { return m.FullSync }, true),
		withTarget(change(k), k.measured(), k.Change, target.Change), change(kp),
		ratio(target, k, kp, func(m Measured) time.Duration { return m.Change }, false),
		withTarget(npl(k), k.measured(), k.NPLMedian(), target.NPL), npl(kp),
		ratio(target, k, kp, Measured.NPLMedian, false),
		rss(k), rss(kp), rssRatio(k, kp),
	)
	return cells
}

func ruleCount(k, kp side) string {
	switch {
	case !k.measured() && !kp.measured():
		return "—"
	case !k.measured():
		return "kube-proxy " + benchtable.Thousands(kp.Rules)
	case !kp.measured() || kp.Rules == k.Rules:
		return benchtable.Thousands(k.Rules)
	}
	return fmt.Sprintf("%s (kube-proxy %s)", benchtable.Thousands(k.Rules), benchtable.Thousands(kp.Rules))
}

func dumpSize(k, kp side) string {
	if k.measured() {
		return mebibytes(k.DumpBytes)
	}
	if kp.measured() {
		return "kube-proxy " + mebibytes(kp.DumpBytes)
	}
	return "—"
}

func mebibytes(n int) string {
	switch {
	case n == 0:
		return "—"
	case n < 1<<20:
		return fmt.Sprintf("%.0f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func fullSync(m side) string {
	if !m.ran {
		return "not run"
	}
	if m.OverBudget {
		return "> " + seconds(m.Budget)
	}
	return fmt.Sprintf("%s (rules %s)", seconds(m.FullSync), seconds(m.FullSyncHist))
}

func change(m side) string {
	if !m.measured() {
		return "—"
	}
	kind := "sync"
	if m.ChangeWasFull {
		kind = "full sync"
	}
	return fmt.Sprintf("%s (%s %s)", seconds(m.Change), kind, seconds(m.ChangeHist))
}

func npl(m side) string {
	if !m.measured() || len(m.NPL) == 0 {
		return "—"
	}
	return seconds(m.NPLMedian())
}

func rss(m side) string {
	if !m.ran || m.RSS == 0 {
		return "—"
	}
	return fmt.Sprintf("%s (%s)", mebibytes(int(m.RSS)), mebibytes(int(m.PeakRSS)))
}

// rssRatio is kube-proxy's VmRSS over kproxy's.
func rssRatio(k, kp side) string {
	if !k.ran || !kp.ran || k.RSS == 0 || kp.RSS == 0 {
		return "—"
	}
	return times(float64(kp.RSS) / float64(k.RSS))
}

// withTarget appends ✓ or ✗ to a kproxy cell when its row has a target
// (an unmeasured value, over budget, misses it).
func withTarget(cell string, measured bool, v, target time.Duration) string {
	if target == 0 {
		return cell
	}
	if measured && v <= target {
		return cell + " ✓"
	}
	return cell + " ✗"
}

// ratio is kube-proxy's value over kproxy's (how many times faster kproxy
// is), marked ✓ or ✗ where the row's target asks kproxy to be ahead
// (above 1×; a lower bound counts when it is at least 1×). When
// kube-proxy's full sync ran over budget, the budget gives a lower bound
// for the full-sync ratio (boundOK) and nothing for the others.
func ratio(t Target, k, kp side, value func(Measured) time.Duration, boundOK bool) string {
	kv := value(k.Measured)
	if !k.measured() || !kp.ran || kv <= 0 {
		return "—"
	}
	var cell string
	var r float64
	bound := kp.OverBudget
	if bound {
		if !boundOK {
			return "—"
		}
		r = float64(kp.Budget) / float64(kv)
		cell = "> " + times(r)
	} else {
		kpv := value(kp.Measured)
		if kpv <= 0 {
			return "—"
		}
		r = float64(kpv) / float64(kv)
		cell = times(r)
	}
	if !t.Ahead {
		return cell
	}
	if r > 1 || (bound && r >= 1) {
		return cell + " ✓"
	}
	return cell + " ✗"
}

func times(r float64) string {
	if r >= 10 {
		return fmt.Sprintf("%.0f×", r)
	}
	return fmt.Sprintf("%.1f×", r)
}

// seconds formats d in seconds with about three significant digits.
func seconds(d time.Duration) string {
	s := d.Seconds()
	switch {
	case s < 1:
		return fmt.Sprintf("%.3f s", s)
	case s < 10:
		return fmt.Sprintf("%.2f s", s)
	case s < 100:
		return fmt.Sprintf("%.1f s", s)
	}
	return fmt.Sprintf("%.0f s", s)
}
