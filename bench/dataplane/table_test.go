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
	for p, v := range map[Path]float64{Direct: 21, DNAT: 20, Kproxy: 18, KproxyLocal: 19, KproxySKLookup: 19.4, IOCopy: 13, HAProxy: 10} {
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
		"| measurement | direct | iptables DNAT | kproxy userspace, REDIRECT portals | kproxy userspace, local portals | kproxy userspace, socket-lookup portals | Go io.Copy relay | HAProxy splice-auto | kproxy REDIRECT target | kproxy REDIRECT vs HAProxy |",
		"| bulk (Gbit/s) | 21.0 (105%) | 20.0 | 18.0 (90%) | 19.0 (95%) | 19.4 (97%) | 13.0 (65%) | 10.0 (50%) | ≥ 85% of DNAT: 90% ✓ | ahead (1.80×) ✓ |",
		"| p99 (ms) | 0.10 | 0.10 | 0.50 | — | — | 0.60 | 0.40 |  | behind (1.25×) ✗ |",
		"| rss (KiB/conn) | — | — | 20.5 | — | — | 30.0 | 25.0 | ≤ 16.0: 20.5 ✗ | ahead (0.82×) ✓ |",
		"| udp (req/s) | — | 1000 | — | — | — | — | — | ≥ 70% of DNAT: not measured | — |",
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

func TestKproxyArgsChoosePortals(t *testing.T) {
	for _, tc := range []struct {
		path        Path
		portalsFlag bool
		want        string // the portal flag, "" for none
		routes      bool
	}{
		{Kproxy, true, "--userspace-portals=redirect", false},
		{Kproxy, false, "", false},
		{KproxyLocal, true, "--userspace-portals=local", true},
		{KproxySKLookup, true, "--userspace-portals=sklookup", true},
		{KproxyIPTables, true, "", false},
		{KproxyNFTables, true, "", false},
	} {
		args := kproxyArgs(tc.path, "services.yaml", tc.portalsFlag)
		var got string
		for _, a := range args {
			if strings.HasPrefix(a, "--userspace-portals") {
				got = a
			}
		}
		if got != tc.want {
			t.Errorf("kproxyArgs(%s, portals flag %v) has %q, want %q: %q", tc.path, tc.portalsFlag, got, tc.want, args)
		}
		if r := routesServiceAddresses(tc.path); r != tc.routes {
			t.Errorf("routesServiceAddresses(%s) = %v, want %v", tc.path, r, tc.routes)
		}
	}
}

func TestIdleConnectionsFitTheProxysLimits(t *testing.T) {
	for _, tc := range []struct {
		name        string
		limit       int
		fdsPerConn  float64
		kproxyShare bool
		want        int
		wantWhy     string
	}{
		{name: "room for all", limit: 200000, fdsPerConn: 2, kproxyShare: true, want: 10000},
		// (20,000 - 128 headroom) / 2.
		{name: "descriptors run out", limit: 20000, fdsPerConn: 2, want: 9936, wantWhy: "2.0 descriptors each, RLIMIT_NOFILE 20000"},
		// The port share is 20,000 / 4 / 2 = 2,500 connections, less slack.
		{name: "kproxy's port share", limit: 20000, fdsPerConn: 2, kproxyShare: true, want: 2436, wantWhy: "kproxy's share per service port of RLIMIT_NOFILE 20000"},
		{name: "pooled descriptors", limit: 20000, fdsPerConn: 3, want: 4416, wantWhy: "3.0 descriptors each, RLIMIT_NOFILE 20000"},
	} {
		n, why := idleConnections(10000, tc.limit, 0, tc.fdsPerConn, tc.kproxyShare)
		if n != tc.want || why != tc.wantWhy {
			t.Errorf("%s: idleConnections = %d, %q; want %d, %q", tc.name, n, why, tc.want, tc.wantWhy)
		}
	}
}
