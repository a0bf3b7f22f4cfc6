package ipvsscale

import (
	"strings"
	"testing"
	"time"
)

func TestMarkdown(t *testing.T) {
	table := &Table{
		Header: []string{"**title**"},
		Notes:  []string{"a note"},
		Rows: []Row{
			{Ports: 1000, Build: 11830 * time.Microsecond, Guest: &GuestResult{
				Ports: 1000, FullSync: 5974 * time.Millisecond, FullSyncOps: 14037, Changes: 20, Change: 10740 * time.Microsecond,
				ChangeOps: 4, FullResync: 1108 * time.Millisecond, FullResyncReads: 1019, FullResyncEnsures: 18,
			}},
			{Ports: 10000, Build: 150 * time.Millisecond},
		},
	}
	want := `**title**  

| service ports × endpoints | desired-state build (host) | full apply (guest) | one-endpoint change (guest) | netlink ops for one change | ops for a no-change resync | periodic full resync, nothing changed (guest) |
|---|---:|---:|---:|---:|---:|---:|
| 1,000 × 10 | 11.8 ms | 5.97 s (14,037 ops) | 10.7 ms (mean of 20) | 4 | 0 | 1.11 s (1,019 reads, 18 ensures, 0 writes) |
| 10,000 × 10 | 150 ms | failed: see the benchmark log | — | — | — | — |

a note  
`
	if got := table.Markdown(); got != want {
		t.Errorf("Markdown:\n%s\nwant:\n%s", got, want)
	}
}

func TestFormatting(t *testing.T) {
	cases := []struct{ got, want string }{
		{duration(2005 * time.Microsecond), "2.00 ms"},
		{duration(42510 * time.Microsecond), "42.5 ms"},
		{duration(709 * time.Millisecond), "709 ms"},
		{duration(5974 * time.Millisecond), "5.97 s"},
		{duration(70890 * time.Millisecond), "70.9 s"},
		{duration(250 * time.Second), "250 s"},
		{mean(4), "4"},
		{mean(4.25), "4.2"},
		{mean(0), "0"},
	}
	for i, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("case %d: %q, want %q", i, tc.got, tc.want)
		}
	}
}

func TestHeaderNamesGuestAndSettings(t *testing.T) {
	s := DefaultSettings()
	h := strings.Join(tableHeader(s, "6.1.176", 90*time.Second), "\n")
	for _, want := range []string{Command, "Linux 6.1.176", s.GuestMem, s.String(), "1.5 min"} {
		if !strings.Contains(h, want) {
			t.Errorf("header does not say %q:\n%s", want, h)
		}
	}
	if h := strings.Join(tableHeader(s, "", time.Minute), "\n"); !strings.Contains(h, "(not reported)") {
		t.Errorf("header without a guest kernel does not say so:\n%s", h)
	}
}
