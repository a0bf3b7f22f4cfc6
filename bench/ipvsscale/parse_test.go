package ipvsscale

import (
	"strings"
	"testing"
	"time"
)

// guestRun is a guest run's output as the benchmark prints it: the parent's
// name, then the child's header and result lines, logs and the rest.
const guestRun = `BenchmarkGuestIPVSSync/ports=100 	goos: linux
goarch: amd64
pkg: kproxy.dev/kproxy/bench/ipvsscale
cpu: AMD EPYC
BenchmarkGuestIPVSSync/ports=100         	      20	   2055078 ns/op	         2.005 ms/one-change	      1437 ops/full-sync	         0 ops/no-change	         4.000 ops/one-change	       119.0 reads/full-resync	        18 ensures/full-resync	         0.1176 s/full-resync	         0.7092 s/full-sync	         0 writes/full-resync	  144045 B/op	     895 allocs/op
--- BENCH: BenchmarkGuestIPVSSync/ports=100
    guest_test.go:209: ipvsscale: guest kernel 6.1.176
    guest_test.go:127: 100 ports × 10 endpoints: full apply took 709ms: IPSets.Add=200
PASS
BenchmarkGuestIPVSSync/ports=10000-4 	5	42571213 ns/op	42.51 ms/one-change	140037 ops/full-sync	0 ops/no-change	4.5 ops/one-change	10019 reads/full-resync	10.41 s/full-resync	70.89 s/full-sync	0 writes/full-resync
ok  	kproxy.dev/kproxy/bench/ipvsscale	16.274s
`

func TestParseGuestOutput(t *testing.T) {
	out, err := ParseGuestOutput(strings.NewReader(guestRun))
	if err != nil {
		t.Fatal(err)
	}
	if out.Kernel != "6.1.176" {
		t.Errorf("Kernel = %q, want 6.1.176", out.Kernel)
	}
	want := map[int]GuestResult{
		100: {Ports: 100, FullSync: 709200 * time.Microsecond, FullSyncOps: 1437, Changes: 20, Change: 2005 * time.Microsecond, ChangeOps: 4,
			NoChangeOps: 0, FullResync: 117600 * time.Microsecond, FullResyncReads: 119, FullResyncEnsures: 18, FullResyncWrites: 0},
		10000: {Ports: 10000, FullSync: 70890 * time.Millisecond, FullSyncOps: 140037, Changes: 5, Change: 42510 * time.Microsecond, ChangeOps: 4.5,
			FullResync: 10410 * time.Millisecond, FullResyncReads: 10019},
	}
	if len(out.Results) != len(want) {
		t.Fatalf("parsed %d results (%v), want %d", len(out.Results), out.Results, len(want))
	}
	for n, w := range want {
		got := out.Results[n]
		// Durations come from decimal seconds: compare to the microsecond.
		got.FullSync, got.Change, got.FullResync = got.FullSync.Round(time.Microsecond), got.Change.Round(time.Microsecond), got.FullResync.Round(time.Microsecond)
		if got != w {
			t.Errorf("ports=%d:\n got %+v\nwant %+v", n, got, w)
		}
	}
}

func TestParseGuestOutputErrors(t *testing.T) {
	cases := []struct {
		name, output, wantErr string
	}{
		{"odd metric fields", "BenchmarkGuestIPVSSync/ports=10 1 5 ns/op 3\n", "not value-unit pairs"},
		{"bad value", "BenchmarkGuestIPVSSync/ports=10 1 5 ns/op x s/full-sync\n", "metric s/full-sync"},
		{"none of ours", "BenchmarkGuestIPVSSync/ports=10 1 5 ns/op 7 B/op\n", "none of the metrics"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseGuestOutput(strings.NewReader(tc.output))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want one saying %q", err, tc.wantErr)
			}
		})
	}
}

func TestParseGuestOutputWithoutResults(t *testing.T) {
	out, err := ParseGuestOutput(strings.NewReader("--- FAIL: BenchmarkGuestIPVSSync/ports=10\nFAIL\n"))
	if err != nil || len(out.Results) != 0 || out.Kernel != "" {
		t.Errorf("ParseGuestOutput = %+v, %v; want nothing found and no error", out, err)
	}
}
