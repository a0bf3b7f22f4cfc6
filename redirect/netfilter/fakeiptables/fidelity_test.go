package fakeiptables

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// fidelityCase is a payload the real tools refuse. wantLine is the line
// restore.Error names for iptables-nft-restore and for the fake, which
// mimics it; legacyLine is the one it names for iptables-legacy-restore,
// when legacy reports the failure elsewhere (0: the same line).
type fidelityCase struct {
	name       string
	payload    string
	wantLine   int
	legacyLine int
}

func fidelityCases() []fidelityCase {
	return []fidelityCase{
		{"jump to a missing chain", "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n-A KUBE-A -j KUBE-MISSING\n-A KUBE-A -j ACCEPT\nCOMMIT\n", 4, 0},
		{"goto a missing chain", "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n-A KUBE-A -g KUBE-MISSING\nCOMMIT\n", 4, 0},
		{"jump before the chain is declared", "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j KUBE-B\n:KUBE-B - [0:0]\nCOMMIT\n", 3, 0},
		{"jump to a missing chain, then a rule in a missing chain", "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j KUBE-NOPE\n-A KUBE-B -j ACCEPT\nCOMMIT\n", 3, 0},
		{"jump to a missing chain in the second table", "*nat\n:KUBE-A - [0:0]\nCOMMIT\n*filter\n:KUBE-B - [0:0]\n-A KUBE-B -j ACCEPT\n-A KUBE-B -j KUBE-NOPE\nCOMMIT\n", 7, 0},
		{"deleting a referenced chain", "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-X KUBE-B\nCOMMIT\n", 5, 0},
		{"deleting a flushed but referenced chain", "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-F KUBE-B\n-X KUBE-B\nCOMMIT\n", 6, 0},
		{"deleting a chain with rules", "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n-X KUBE-A\nCOMMIT\n", 4, 0},
		{"deleting a missing chain", "*filter\n-X KUBE-NONE\nCOMMIT\n", 2, 0},
		{"deleting a missing rule", "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n-D KUBE-A -j RETURN\nCOMMIT\n", 4, 0},
		{"deleting by a number past the end", "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n-D KUBE-A 1\n-D KUBE-A 1\nCOMMIT\n", 5, 0},
		{"inserting past the end", "*filter\n:KUBE-A - [0:0]\n-I KUBE-A 3 -j ACCEPT\nCOMMIT\n", 3, 0},
		{"creating a chain that exists", "*filter\n:KUBE-A - [0:0]\n-N KUBE-A\nCOMMIT\n", 3, 0},
		{"rule in an undeclared chain", "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n-A KUBE-NONE -j ACCEPT\nCOMMIT\n", 4, 0},
		{"a deleted chain is gone", "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-X KUBE-B\n-A KUBE-B -j ACCEPT\nCOMMIT\n", 6, 5},
		{"REJECT in the nat table", "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -p tcp -j REJECT\nCOMMIT\n", 3, 4},
		{"DROP in the nat table", "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -p tcp -j DROP\nCOMMIT\n", 3, 0},
		{"DNAT without a destination", "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -p tcp -j DNAT\nCOMMIT\n", 3, 0},
		{"unknown match", "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -m foo --bar -j ACCEPT\nCOMMIT\n", 3, 0},
		{"unknown option", "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -p tcp -m tcp --foo 1 -j ACCEPT\nCOMMIT\n", 3, 0},
		{"bad address", "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -s 1.2.3.4.5 -j ACCEPT\nCOMMIT\n", 3, 0},
		{"not a command", "*filter\n:KUBE-A - [0:0]\nbogus line\nCOMMIT\n", 3, 0},
		{"table opened before COMMIT", "*filter\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n*nat\nCOMMIT\n", 4, 0},
		{"rule outside a table", "*filter\n:KUBE-A - [0:0]\nCOMMIT\n-A KUBE-A -j ACCEPT\n", 4, 0},
		{"unknown table", "*natt\n:KUBE-A - [0:0]\nCOMMIT\n", 1, 0},
		{"missing COMMIT", "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j ACCEPT\n", 4, 0},
	}
}

// fidelityBase is in place before each case, so that cases that fail in
// a later table show which tables each tool committed.
const fidelityBase = "*nat\n:KUBE-OLD - [0:0]\n-A KUBE-OLD -j RETURN\nCOMMIT\n*filter\n:KUBE-OLD - [0:0]\nCOMMIT\n"

// restoreErrorLine runs payload through restore.Runner and returns the line
// the *restore.Error names.
func restoreErrorLine(t *testing.T, r *restore.Runner, payload string) int {
	t.Helper()
	err := r.Restore(context.Background(), []byte(payload))
	var re *restore.Error
	if !errors.As(err, &re) {
		t.Fatalf("restore = %v, want a *restore.Error", err)
	}
	return re.Line
}

func TestFakeFailuresNameTheRealToolsLines(t *testing.T) {
	for _, tc := range fidelityCases() {
		t.Run(tc.name, func(t *testing.T) {
			f := New(ipfamily.IPv4)
			r, err := restore.NewRunner(ipfamily.IPv4, kernel.NFT, f)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Restore(context.Background(), []byte(fidelityBase)); err != nil {
				t.Fatal(err)
			}
			if got := restoreErrorLine(t, r, tc.payload); got != tc.wantLine {
				t.Errorf("restore.Error names line %d, want %d (what it names for iptables-nft-restore)", got, tc.wantLine)
			}
		})
	}
}

// TestRealToolsFailLikeTheFake feeds the same payloads to both real tools in
// a throwaway namespace, checks restore.Error names the lines the fake's
// test expects, and that the tables each tool leaves are the fake's.
func TestRealToolsFailLikeTheFake(t *testing.T) {
	for _, be := range kernel.Backends() {
		t.Run(string(be), func(t *testing.T) {
			if lab.InFreshNetns(t) {
				return
			}
			real, err := restore.NewRunner(ipfamily.IPv4, be, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range fidelityCases() {
				resetTables(t, be)
				if err := real.Restore(context.Background(), []byte(fidelityBase)); err != nil {
					t.Fatal(err)
				}
				want := tc.wantLine
				if be == kernel.Legacy && tc.legacyLine != 0 {
					want = tc.legacyLine
				}
				if got := restoreErrorLine(t, real, tc.payload); got != want {
					t.Errorf("%s: restore.Error names line %d, want %d", tc.name, got, want)
				}
				fake := New(ipfamily.IPv4)
				for _, p := range []string{fidelityBase, tc.payload} {
					_, _ = fake.Run(context.Background(), []byte(p), "iptables-nft-restore", "--noflush")
				}
				for _, table := range []string{"nat", "filter"} {
					if got, want := realSave(t, be, table), fake.Save(table); got != want {
						t.Errorf("%s: after the failure %s holds\n%s\nthe fake holds\n%s", tc.name, be.SaveCommand(ipfamily.IPv4), got, want)
					}
				}
			}
		})
	}
}

// TestFakeSavesLikeTheRealTools restores a kube-proxy-like ruleset written
// in iptables-save's canonical text, and checks that the fake's dump is the
// real tools' dump, character for character.
func TestFakeSavesLikeTheRealTools(t *testing.T) {
	payload, err := os.ReadFile("testdata/canonical.restore")
	if err != nil {
		t.Fatal(err)
	}
	fake := New(ipfamily.IPv4)
	if _, err := fake.Run(context.Background(), payload, "iptables-nft-restore", "--noflush"); err != nil {
		t.Fatalf("the fake refused the canonical ruleset: %v", err)
	}
	for _, be := range kernel.Backends() {
		t.Run(string(be), func(t *testing.T) {
			if lab.InFreshNetns(t) {
				return
			}
			lab.Run(t, be.RestoreCommand(ipfamily.IPv4), "--noflush", "testdata/canonical.restore")
			for _, table := range []string{"nat", "filter"} {
				if got, want := realSave(t, be, table), fake.Save(table); got != want {
					t.Errorf("%s -t %s:\n%s\nthe fake saves\n%s", be.SaveCommand(ipfamily.IPv4), table, got, want)
				}
			}
		})
	}
}

// resetTables empties nat and filter: a restore without --noflush.
func resetTables(t *testing.T, be kernel.Backend) {
	t.Helper()
	ex := kernel.ExecRunner{}
	if _, err := ex.Run(context.Background(), []byte("*nat\nCOMMIT\n*filter\nCOMMIT\n"), be.RestoreCommand(ipfamily.IPv4)); err != nil {
		t.Fatal(err)
	}
}

// realSave is the real tool's dump of one table without its comments.
func realSave(t *testing.T, be kernel.Backend, table string) string {
	t.Helper()
	return lab.WithoutComments(lab.Run(t, be.SaveCommand(ipfamily.IPv4), "-t", table))
}

func TestFidelityCasesAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for _, tc := range fidelityCases() {
		if seen[tc.payload] || !strings.HasSuffix(tc.payload, "\n") {
			t.Errorf("case %q repeats a payload or lacks its final newline", tc.name)
		}
		seen[tc.payload] = true
	}
}
