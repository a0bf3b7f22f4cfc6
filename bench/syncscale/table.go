package syncscale

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Target is issue 4's goal for kproxy at one size; zero means none.
type Target struct {
	FullSync time.Duration
	NPL      time.Duration
}

// TargetFor returns the targets a row of n services is held to. Issue 4
// sets them at 5,000 services (full sync ≤ 10 s, network programming ≤ 1 s)
// and 30,000 (network programming ≤ 2 s); a smaller size is held to the
// next larger size's target, as every cost grows with the service count.
func TargetFor(n int) Target {
	var t Target
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

// Markdown renders the header, the table and the notes.
func (t *Table) Markdown() string {
	var b strings.Builder
	for _, h := range t.Header {
		fmt.Fprintf(&b, "%s  \n", h)
	}
	if len(t.Header) > 0 {
		b.WriteString("\n")
	}
	b.WriteString("| backend | service ports | nat rules | nat+filter save | first full sync: kproxy | kube-proxy | kube-proxy ÷ kproxy" +
		" | one change in kernel: kproxy | kube-proxy | kube-proxy ÷ kproxy" +
		" | new service answers (p50): kproxy | kube-proxy | kube-proxy ÷ kproxy |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, spec := range t.Specs {
		r, ok := t.Results[spec.Name()]
		if !ok {
			fmt.Fprintf(&b, "| %s | %s | failed: see the benchmark log |%s\n", spec.Backend, thousands(spec.Services), strings.Repeat(" — |", 10))
			continue
		}
		b.WriteString(t.row(r))
	}
	if len(t.Notes) > 0 {
		b.WriteString("\n")
		for _, n := range t.Notes {
			fmt.Fprintf(&b, "%s  \n", n)
		}
	}
	return b.String()
}

func (t *Table) row(r Row) string {
	k, kp := r.Proxies[Kproxy], r.Proxies[KubeProxy]
	target := TargetFor(r.Spec.Services)
	cells := []string{string(r.Spec.Backend), thousands(r.Spec.Services), ruleCount(k, kp), mebibytes(k.SaveBytes)}
	cells = append(cells,
		withTarget(fullSync(k), !k.OverBudget, k.FullSync, target.FullSync), fullSync(kp), ratio(k, kp, func(m Measured) time.Duration { return m.FullSync }, true),
		change(k), change(kp), ratio(k, kp, func(m Measured) time.Duration { return m.Change }, false),
		withTarget(npl(k), !k.OverBudget, k.NPLMedian(), target.NPL), npl(kp), ratio(k, kp, Measured.NPLMedian, false),
	)
	return "| " + strings.Join(cells, " | ") + " |\n"
}

func ruleCount(k, kp Measured) string {
	if k.OverBudget {
		return "—"
	}
	if kp.OverBudget || kp.NATRules == k.NATRules {
		return thousands(k.NATRules)
	}
	return fmt.Sprintf("%s (kube-proxy %s)", thousands(k.NATRules), thousands(kp.NATRules))
}

// thousands writes n with comma separators, as issue 4 does: 160,005.
func thousands(n int) string {
	s := strconv.Itoa(n)
	if n < 0 {
		return "-" + thousands(-n)
	}
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

func mebibytes(n int) string {
	if n == 0 {
		return "—"
	}
	return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
}

func fullSync(m Measured) string {
	if m.OverBudget {
		return "> " + seconds(m.Budget)
	}
	return fmt.Sprintf("%s (rules %s)", seconds(m.FullSync), seconds(m.FullSyncHist))
}

func change(m Measured) string {
	if m.OverBudget {
		return "—"
	}
	kind := "sync"
	if m.ChangeWasFull {
		kind = "full sync"
	}
	return fmt.Sprintf("%s (%s %s)", seconds(m.Change), kind, seconds(m.ChangeHist))
}

func npl(m Measured) string {
	if m.OverBudget || len(m.NPL) == 0 {
		return "—"
	}
	return seconds(m.NPLMedian())
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

// ratio is kube-proxy's value over kproxy's: how many times faster kproxy
// is. When kube-proxy's full sync ran over budget, the budget gives a lower
// bound for the full-sync ratio (boundOK) and nothing for the others.
func ratio(k, kp Measured, value func(Measured) time.Duration, boundOK bool) string {
	kv := value(k)
	if k.OverBudget || kv <= 0 {
		return "—"
	}
	if kp.OverBudget {
		if !boundOK {
			return "—"
		}
		return "> " + times(float64(kp.Budget)/float64(kv))
	}
	kpv := value(kp)
	if kpv <= 0 {
		return "—"
	}
	return times(float64(kpv) / float64(kv))
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
