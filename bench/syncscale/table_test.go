package syncscale

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/redirect/kernel"
)

// goldenTable has a row of every kind: both measured, kproxy missing a
// target, kube-proxy over budget, a change answered by a full sync, a size
// without a full-sync target, and a row that failed.
func goldenTable() *Table {
	s := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	measured := func(full, rules, change, hist float64, npl ...float64) Measured {
		m := Measured{FullSync: s(full), FullSyncHist: s(rules), NATRules: 160005, SaveBytes: 21 << 20,
			Change: s(change), ChangeHist: s(hist), ChangeHistSyncs: 1, Commits: 1, Budget: 2 * time.Minute}
		for _, v := range npl {
			m.NPL = append(m.NPL, s(v))
		}
		return m
	}
	overBudget := Measured{OverBudget: true, Budget: 2 * time.Minute}
	rows := []Row{
		{Spec: RowSpec{kernel.NFT, 100}, Populate: s(0.3), Proxies: map[Proxy]Measured{
			Kproxy: func() Measured {
				m := measured(1.46, 0.28, 0.273, 0.361, 0.3, 0.27, 0.54)
				m.NATRules, m.SaveBytes, m.ChangeWasFull = 3108, 473000, true
				return m
			}(),
			KubeProxy: func() Measured {
				m := measured(0.865, 0.27, 0.045, 0.043, 1.32, 1.3, 1.31, 1.33)
				m.NATRules = 3108
				return m
			}(),
		}},
		{Spec: RowSpec{kernel.NFT, 5000}, Populate: s(31), Proxies: map[Proxy]Measured{
			Kproxy:    measured(12.5, 9.8, 0.41, 0.2, 1.2, 0.9, 1.1),
			KubeProxy: overBudget,
		}},
		{Spec: RowSpec{kernel.Legacy, 10000}, Populate: s(65), Proxies: map[Proxy]Measured{
			Kproxy: measured(8.1, 3.3, 0.5, 0.45, 0.8),
			KubeProxy: func() Measured {
				m := measured(61, 58, 4.4, 4.1, 9.9)
				m.NATRules = 160007
				return m
			}(),
		}},
	}
	t := &Table{
		Header:  []string{"Date: today"},
		Specs:   []RowSpec{{kernel.NFT, 100}, {kernel.NFT, 5000}, {kernel.Legacy, 100}, {kernel.Legacy, 10000}},
		Results: map[string]Row{},
	}
	for _, r := range rows {
		t.Results[r.Spec.Name()] = r
	}
	s5 := DefaultSettings()
	t.Notes = Notes(s5, t.Specs, t.Results)
	return t
}

func TestTableMarkdownGolden(t *testing.T) {
	testkit.Golden(t, filepath.Join("testdata", "table.golden"), goldenTable().Markdown())
}

func TestTargetFor(t *testing.T) {
	tests := []struct {
		n    int
		want Target
	}{
		{100, Target{FullSync: 10 * time.Second, NPL: time.Second}},
		{5000, Target{FullSync: 10 * time.Second, NPL: time.Second}},
		{10000, Target{NPL: 2 * time.Second}},
		{30000, Target{NPL: 2 * time.Second}},
		{30001, Target{}},
	}
	for _, tt := range tests {
		if got := TargetFor(tt.n); got != tt.want {
			t.Errorf("TargetFor(%d) = %+v, want %+v", tt.n, got, tt.want)
		}
	}
}

func TestNPLMedian(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var out []time.Duration
		for _, x := range v {
			out = append(out, time.Duration(x)*time.Millisecond)
		}
		return out
	}
	tests := []struct {
		npl  []time.Duration
		want time.Duration
	}{
		{nil, 0},
		{ms(700), 700 * time.Millisecond},
		{ms(900, 100, 500), 500 * time.Millisecond},
		{ms(400, 100, 300, 200), 250 * time.Millisecond},
	}
	for _, tt := range tests {
		m := Measured{NPL: tt.npl}
		if got := m.NPLMedian(); got != tt.want {
			t.Errorf("NPLMedian(%v) = %v, want %v", tt.npl, got, tt.want)
		}
		if len(tt.npl) > 1 && m.NPL[0] != tt.npl[0] {
			t.Errorf("NPLMedian reordered the measurements")
		}
	}
}

func TestRowRoundTrip(t *testing.T) {
	want := goldenTable().Results["nft-5000"]
	path := filepath.Join(t.TempDir(), "row.json")
	if err := WriteRow(path, want); err != nil {
		t.Fatal(err)
	}
	got, err := ReadRow(path)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("row after a round trip (-want +got):\n%s", diff)
	}
	if _, err := ReadRow(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("ReadRow of a missing file succeeded")
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 160005: "160,005", 1234567: "1,234,567", -4500: "-4,500"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
