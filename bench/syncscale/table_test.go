package syncscale

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/bench/testkit"
)

// goldenTable has a row of every kind: both measured, kproxy missing a
// target, kube-proxy over budget, a change answered by a full sync, a size
// without a full-sync target, a row that failed, nftables rows ahead of
// and behind kube-proxy, and a row where kproxy did not run.
func goldenTable() *Table {
	s := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	measured := func(full, rules, change, hist float64, npl ...float64) Measured {
		m := Measured{FullSync: s(full), FullSyncHist: s(rules), Rules: 160005, DumpBytes: 21 << 20,
			Change: s(change), ChangeHist: s(hist), ChangeHistSyncs: 1, Commits: 1, Budget: 2 * time.Minute,
			RSS: 60 << 20, PeakRSS: 75 << 20}
		for _, v := range npl {
			m.NPL = append(m.NPL, s(v))
		}
		return m
	}
	overBudget := Measured{OverBudget: true, Budget: 2 * time.Minute, RSS: 300 << 20, PeakRSS: 310 << 20}
	rows := []Row{
		{Spec: RowSpec{IPTablesNFT, 100}, Populate: s(0.3), Load: "1.20 0.80 0.50", LoadAfter: "1.50 0.90 0.55", Proxies: map[Proxy]Measured{
			Kproxy: func() Measured {
				m := measured(1.46, 0.28, 0.273, 0.361, 0.3, 0.27, 0.54)
				m.Rules, m.DumpBytes, m.ChangeWasFull = 3108, 473000, true
				return m
			}(),
			KubeProxy: func() Measured {
				m := measured(0.865, 0.27, 0.045, 0.043, 1.32, 1.3, 1.31, 1.33)
				m.Rules, m.RSS = 3108, 90<<20
				return m
			}(),
		}},
		{Spec: RowSpec{IPTablesNFT, 5000}, Populate: s(31), Proxies: map[Proxy]Measured{
			Kproxy:    measured(12.5, 9.8, 0.41, 0.2, 1.2, 0.9, 1.1),
			KubeProxy: overBudget,
		}},
		{Spec: RowSpec{IPTablesLegacy, 10000}, Populate: s(65), Proxies: map[Proxy]Measured{
			Kproxy: measured(8.1, 3.3, 0.5, 0.45, 0.8),
			KubeProxy: func() Measured {
				m := measured(61, 58, 4.4, 4.1, 9.9)
				m.Rules = 160007
				return m
			}(),
		}},
		{Spec: RowSpec{NFTables, 1000}, Populate: s(6.2), Proxies: map[Proxy]Measured{
			Kproxy: func() Measured {
				m := measured(1.1, 0.2, 0.012, 0.009, 0.05, 0.04, 0.06)
				m.Rules, m.DumpBytes, m.RSS, m.PeakRSS = 23012, 2<<20, 40<<20, 48<<20
				return m
			}(),
			KubeProxy: func() Measured {
				m := measured(1.9, 0.9, 0.011, 0.008, 0.09)
				m.Rules, m.DumpBytes, m.RSS, m.PeakRSS = 23012, 2<<20, 80<<20, 96<<20
				return m
			}(),
		}},
		{Spec: RowSpec{NFTables, 30000}, Populate: s(190), Proxies: map[Proxy]Measured{
			Kproxy: measured(11.2, 6.5, 0.09, 0.05, 0.31),
			KubeProxy: func() Measured {
				m := overBudget
				m.Budget = 10 * time.Minute
				return m
			}(),
		}},
		{Spec: RowSpec{NFTables, 100}, Populate: s(0.4), Proxies: map[Proxy]Measured{
			KubeProxy: measured(0.9, 0.1, 0.02, 0.01, 0.05),
		}},
	}
	t := &Table{
		Header: []string{"Date: today"},
		Specs: []RowSpec{{IPTablesNFT, 100}, {IPTablesNFT, 5000}, {IPTablesLegacy, 100}, {IPTablesLegacy, 10000},
			{NFTables, 100}, {NFTables, 1000}, {NFTables, 30000}},
		Results: map[string]Row{},
	}
	for _, r := range rows {
		t.Results[r.Spec.Name()] = r
	}
	t.Notes = Notes(DefaultSettings(), t.Specs, t.Results)
	return t
}

func TestTableMarkdownGolden(t *testing.T) {
	testkit.Golden(t, filepath.Join("testdata", "table.golden"), goldenTable().Markdown())
}

func TestTargetFor(t *testing.T) {
	nft := Target{FullSync: 10 * time.Second, Change: 100 * time.Millisecond, NPL: 300 * time.Millisecond, Ahead: true}
	tests := []struct {
		mode Mode
		n    int
		want Target
	}{
		{IPTablesNFT, 100, Target{FullSync: 10 * time.Second, NPL: time.Second}},
		{IPTablesLegacy, 5000, Target{FullSync: 10 * time.Second, NPL: time.Second}},
		{IPTablesNFT, 10000, Target{NPL: 2 * time.Second}},
		{IPTablesLegacy, 30000, Target{NPL: 2 * time.Second}},
		{IPTablesNFT, 30001, Target{}},
		{NFTables, 100, nft},
		{NFTables, 30000, nft},
		{NFTables, 30001, Target{Ahead: true}},
	}
	for _, tt := range tests {
		if got := TargetFor(tt.mode, tt.n); got != tt.want {
			t.Errorf("TargetFor(%s, %d) = %+v, want %+v", tt.mode, tt.n, got, tt.want)
		}
	}
}

func TestRowRoundTrip(t *testing.T) {
	want := goldenTable().Results["iptables-nft-5000"]
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
