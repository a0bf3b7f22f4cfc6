package dataplane

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseExtra(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    []ExtraProxy
		wantErr string
	}{
		{in: ""},
		{in: "old=/tmp/old", want: []ExtraProxy{{Path: "old", Binary: "/tmp/old"}}},
		{in: "a=/bin/a, b=/bin/b", want: []ExtraProxy{{Path: "a", Binary: "/bin/a"}, {Path: "b", Binary: "/bin/b"}}},
		{in: "old", wantErr: "not name=/path/to/binary"},
		{in: "=/bin/a", wantErr: "not name=/path/to/binary"},
		{in: "a=relative/a", wantErr: "must be absolute"},
		{in: "a=/bin/a,a=/bin/b", wantErr: "used twice"},
		{in: "kproxy=/bin/a", wantErr: "standard path"},
		{in: "a=/a,b=/b,c=/c,d=/d,e=/e", wantErr: "at most 4"},
	} {
		got, err := ParseExtra(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseExtra(%q) error = %v, want one saying %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("ParseExtra(%q): %v", tc.in, err)
			continue
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseExtra(%q) (-want +got):\n%s", tc.in, diff)
		}
	}
}

func TestParseComparison(t *testing.T) {
	for _, tc := range []struct {
		paths, rounds string
		want          comparison
		wantErr       bool
	}{
		{want: comparison{rounds: 1}},
		{paths: "kproxy,haproxy", rounds: "3", want: comparison{paths: []string{"kproxy", "haproxy"}, rounds: 3}},
		{rounds: "0", wantErr: true},
		{rounds: "21", wantErr: true},
		{rounds: "x", wantErr: true},
	} {
		got, err := parseComparison(tc.paths, tc.rounds)
		if (err != nil) != tc.wantErr {
			t.Errorf("parseComparison(%q, %q) error = %v, want error %v", tc.paths, tc.rounds, err, tc.wantErr)
			continue
		}
		if !tc.wantErr && !cmp.Equal(tc.want, got, cmp.AllowUnexported(comparison{})) {
			t.Errorf("parseComparison(%q, %q) = %+v, want %+v", tc.paths, tc.rounds, got, tc.want)
		}
	}
}

func TestSelectedPathsKeepDNAT(t *testing.T) {
	for _, tc := range []struct {
		c    comparison
		want []Path
	}{
		{comparison{}, []Path{Direct, DNAT, Kproxy, KproxyLocal, KproxySKLookup, IOCopy, HAProxy, "old"}},
		{comparison{paths: []string{"kproxy-local"}}, []Path{DNAT, KproxyLocal}},
		{comparison{paths: []string{"kproxy-local", "kproxy-sklookup", "haproxy"}}, []Path{DNAT, KproxyLocal, KproxySKLookup, HAProxy}},
		{comparison{paths: []string{"kproxy"}}, []Path{DNAT, Kproxy}},
		{comparison{paths: []string{"haproxy", "old"}}, []Path{DNAT, HAProxy, "old"}},
	} {
		var got []Path
		for _, p := range append(Paths(), "old") {
			if tc.c.includes(p) {
				got = append(got, p)
			}
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("paths measured for %v (-want +got):\n%s", tc.c.paths, diff)
		}
	}
}

func TestRotate(t *testing.T) {
	in := []string{"a", "b", "c"}
	for round, want := range [][]string{{"a", "b", "c"}, {"b", "c", "a"}, {"c", "a", "b"}, {"a", "b", "c"}} {
		if diff := cmp.Diff(want, rotate(in, round)); diff != "" {
			t.Errorf("rotate round %d (-want +got):\n%s", round, diff)
		}
	}
}

func TestRoundValues(t *testing.T) {
	r := newRoundValues()
	for _, v := range []struct {
		p Path
		v float64
	}{{DNAT, 100}, {Kproxy, 70}, {DNAT, 200}, {Kproxy, 100}, {DNAT, 150}, {Kproxy, 90}} {
		r.add("rate", v.p, v.v)
	}
	want := []rowValue{{"rate", DNAT, 150}, {"rate", Kproxy, 90}}
	if diff := cmp.Diff(want, r.medians(), cmp.AllowUnexported(rowValue{})); diff != "" {
		t.Errorf("medians (-want +got):\n%s", diff)
	}
	wantReport := "rate dnat: 100 200 150 median 150\nrate kproxy: 70 (70%) 100 (50%) 90 (60%) median 90\n"
	if got := r.report(DNAT); got != wantReport {
		t.Errorf("report =\n%s\nwant\n%s", got, wantReport)
	}
}

func TestParseProcCPU(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stat    string
		want    ProcCPU
		wantErr bool
	}{
		{name: "process", stat: "1234 (kproxy) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0 100 0",
			want: ProcCPU{User: 2500 * time.Millisecond, System: 500 * time.Millisecond}},
		{name: "command with spaces and parentheses", stat: "7 (a (b) c) R 1 7 7 0 -1 0 0 0 0 0 1 2 0 0 20 0 1 0 5 0",
			want: ProcCPU{User: 10 * time.Millisecond, System: 20 * time.Millisecond}},
		{name: "no command", stat: "1234 S 1", wantErr: true},
		{name: "truncated", stat: "1 (x) S 1 2 3", wantErr: true},
		{name: "not a number", stat: "1 (x) S 1 1 1 0 -1 0 0 0 0 0 x 2 0 0 20 0 1 0 5 0", wantErr: true},
	} {
		got, err := ParseProcCPU(tc.stat)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: ParseProcCPU = %v, %v; want %v (error %v)", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestTableExtraColumns(t *testing.T) {
	tab := &Table{Rows: []Row{{ID: "rate", Title: "rate", Unit: "req/s", MinRatio: 0.7}}, Extra: []Path{"old"}}
	tab.Set("rate", DNAT, 100)
	tab.Set("rate", Kproxy, 80)
	tab.Set("rate", "old", 60)
	md := tab.Markdown()
	for _, want := range []string{
		"| measurement | direct | iptables DNAT | kproxy userspace, REDIRECT portals | kproxy userspace, local portals | kproxy userspace, socket-lookup portals | Go io.Copy relay | HAProxy splice-auto | old | kproxy REDIRECT target | kproxy REDIRECT vs HAProxy |",
		"| rate (req/s) | — | 100 | 80 (80%) | — | — | — | — | 60 (60%) | ≥ 70% of DNAT: 80% ✓ | — |",
	} {
		if !strings.Contains(md, want+"\n") {
			t.Errorf("table lacks the line\n%s\nin:\n%s", want, md)
		}
	}
}

func TestParseMachineCPU(t *testing.T) {
	for _, tc := range []struct {
		name    string
		stat    string
		want    MachineCPU
		wantErr bool
	}{
		{name: "two CPUs", stat: "cpu  100 5 50 800 20 3 7 2 0 0\ncpu0 50 2 25 400 10 1 3 1 0 0\nintr 1\n",
			want: MachineCPU{Busy: 1670 * time.Millisecond, Total: 9870 * time.Millisecond}},
		{name: "only the aggregate line", stat: "cpu 1 0 1 2 0 0 0 0",
			want: MachineCPU{Busy: 20 * time.Millisecond, Total: 40 * time.Millisecond}},
		{name: "per-CPU line first", stat: "cpu0 1 0 1 2 0 0 0 0\n", wantErr: true},
		{name: "too few fields", stat: "cpu 1 2 3 4\n", wantErr: true},
		{name: "not a number", stat: "cpu 1 x 3 4 5 6 7 8\n", wantErr: true},
		{name: "empty", stat: "", wantErr: true},
	} {
		got, err := ParseMachineCPU(tc.stat)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("%s: ParseMachineCPU = %+v, %v; want %+v (error %v)", tc.name, got, err, tc.want, tc.wantErr)
		}
	}
}

func TestIPTablesModeRows(t *testing.T) {
	got := map[string]Row{}
	for _, r := range iptablesModeRows(rows(100)) {
		got[r.ID] = r
	}
	for _, tc := range []struct {
		id       string
		kept     bool
		minRatio float64
	}{
		{id: "bulk-1-stream", kept: true, minRatio: iptablesModeTarget},
		{id: "keepalive-p99", kept: true},
		{id: "udp-rate", kept: true, minRatio: iptablesModeTarget},
		{id: "udp-machine-cpu", kept: true},
		{id: "udp-proxy-cpu"},
		{id: "keepalive-proxy-cpu"},
		{id: "idle-conn-rss"},
		{id: "idle-conn-fds"},
	} {
		r, ok := got[tc.id]
		if ok != tc.kept || r.MinRatio != tc.minRatio {
			t.Errorf("row %s: kept %v with MinRatio %v; want kept %v with %v", tc.id, ok, r.MinRatio, tc.kept, tc.minRatio)
		}
	}
}
