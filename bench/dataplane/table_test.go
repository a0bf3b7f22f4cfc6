package dataplane

import (
	"strings"
	"testing"
)

func TestTableMarkdown(t *testing.T) {
	tab := &Table{
		Rows: []Row{
			{ID: "bulk", Title: "bulk", Unit: "Gbit/s", Decimals: 1, MinRatio: 0.85},
			{ID: "p99", Title: "p99", Unit: "ms", Decimals: 2, LowerIsBetter: true, NoRatio: true},
			{ID: "rss", Title: "rss", Unit: "KiB/conn", Decimals: 1, LowerIsBetter: true, MaxValue: 16, NoRatio: true},
			{ID: "udp", Title: "udp", Unit: "req/s", MinRatio: 0.7},
		},
		Header: []string{"Date: today"},
		Notes:  []string{"a note"},
	}
	for p, v := range map[Path]float64{Direct: 21, DNAT: 20, Kproxy: 18, KproxyLocal: 19, IOCopy: 13, HAProxy: 10} {
		tab.Set("bulk", p, v)
	}
	for p, v := range map[Path]float64{Direct: 0.1, DNAT: 0.1, Kproxy: 0.5, IOCopy: 0.6, HAProxy: 0.4} {
		tab.Set("p99", p, v)
	}
	for p, v := range map[Path]float64{Kproxy: 20.5, IOCopy: 30, HAProxy: 25} {
		tab.Set("rss", p, v)
	}
	tab.Set("udp", DNAT, 1000) // kproxy not measured

	md := tab.Markdown()
	lines := strings.Split(md, "\n")
	want := []string{
		"Date: today  ",
		"| measurement | direct | iptables DNAT | kproxy userspace, REDIRECT portals | kproxy userspace, local portals | Go io.Copy relay | HAProxy splice-auto | kproxy REDIRECT target | kproxy REDIRECT vs HAProxy |",
		"| bulk (Gbit/s) | 21.0 (105%) | 20.0 | 18.0 (90%) | 19.0 (95%) | 13.0 (65%) | 10.0 (50%) | ≥ 85% of DNAT: 90% ✓ | ahead (1.80×) ✓ |",
		"| p99 (ms) | 0.10 | 0.10 | 0.50 | — | 0.60 | 0.40 |  | behind (1.25×) ✗ |",
		"| rss (KiB/conn) | — | — | 20.5 | — | 30.0 | 25.0 | ≤ 16.0: 20.5 ✗ | ahead (0.82×) ✓ |",
		"| udp (req/s) | — | 1000 | — | — | — | — | ≥ 70% of DNAT: not measured | — |",
		"a note  ",
	}
	for _, w := range want {
		found := false
		for _, l := range lines {
			if l == w {
				found = true
			}
		}
		if !found {
			t.Errorf("table lacks the line\n%s\nin:\n%s", w, md)
		}
	}
	if r, ok := tab.Ratio("bulk", Kproxy); !ok || r != 0.9 {
		t.Errorf("Ratio(bulk, kproxy) = %v, %v; want 0.9", r, ok)
	}
	if _, ok := tab.Ratio("rss", Kproxy); ok {
		t.Error("Ratio(rss, kproxy) with no DNAT value reported a ratio")
	}
}

func TestTableWithOtherSubjectAndColumns(t *testing.T) {
	tab := &Table{
		Rows:    []Row{{ID: "bulk", Title: "bulk", Unit: "Gbit/s", Decimals: 1, MinRatio: 0.95}},
		Columns: []Path{Direct, DNAT, KproxyIPTables},
		Subject: KproxyIPTables,
	}
	for p, v := range map[Path]float64{Direct: 21, DNAT: 20, KproxyIPTables: 19.6, Kproxy: 5} {
		tab.Set("bulk", p, v)
	}
	md := tab.Markdown()
	for _, w := range []string{
		"| measurement | direct | iptables DNAT | kproxy iptables mode | kproxy iptables mode target |",
		"| bulk (Gbit/s) | 21.0 (105%) | 20.0 | 19.6 (98%) | ≥ 95% of DNAT: 98% ✓ |",
	} {
		if !strings.Contains(md, w+"\n") {
			t.Errorf("table lacks the line\n%s\nin:\n%s", w, md)
		}
	}
}
