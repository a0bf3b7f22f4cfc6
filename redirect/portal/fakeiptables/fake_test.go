package fakeiptables

import (
	"context"
	"errors"
	"strings"
	"testing"

	"kproxy.dev/kproxy/redirect/kernel"
)

func restore(f *Fake, input string) error {
	_, err := f.Run(context.Background(), []byte(input), "iptables-nft-restore", "--noflush")
	return err
}

func TestRestoreFailures(t *testing.T) {
	cases := []struct {
		name, input, wantLine, wantMsg string
	}{
		{
			name:     "jump to a missing chain",
			input:    "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -j KUBE-MISSING\nCOMMIT\n",
			wantLine: "Error occurred at line: 3", wantMsg: "KUBE-MISSING",
		},
		{
			name:     "deleting a referenced chain",
			input:    "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j KUBE-B\n-X KUBE-B\nCOMMIT\n",
			wantLine: "Error occurred at line: 5", wantMsg: "still referenced",
		},
		{
			name:     "missing COMMIT",
			input:    "*nat\n:KUBE-A - [0:0]\n",
			wantLine: "COMMIT expected at line 3",
		},
		{
			name:     "unknown table",
			input:    "*natt\n:KUBE-A - [0:0]\nCOMMIT\n",
			wantLine: "Error occurred at line: 1", wantMsg: "natt",
		},
		{
			name:     "REJECT in the nat table",
			input:    "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -p tcp -j REJECT\nCOMMIT\n",
			wantLine: "Error occurred at line: 3", wantMsg: "REJECT",
		},
		{
			name:     "rule in an undeclared chain",
			input:    "*filter\n-A KUBE-NONE -j ACCEPT\nCOMMIT\n",
			wantLine: "Error occurred at line: 2", wantMsg: "KUBE-NONE",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := New()
			before := f.Save("")
			err := restore(f, tc.input)
			var ce *kernel.CommandError
			if !errors.As(err, &ce) {
				t.Fatalf("restore = %v, want a *kernel.CommandError", err)
			}
			if !strings.Contains(ce.Stderr, tc.wantLine) || !strings.Contains(ce.Stderr, tc.wantMsg) {
				t.Errorf("stderr %q, want %q and %q", ce.Stderr, tc.wantLine, tc.wantMsg)
			}
			if after := f.Save(""); after != before {
				t.Errorf("a failed restore changed the tables:\n%s", after)
			}
		})
	}
}

func TestRestoreCommitsTablesBeforeTheFailingOne(t *testing.T) {
	f := New()
	err := restore(f, "*nat\n:KUBE-A - [0:0]\nCOMMIT\n*filter\n:KUBE-B - [0:0]\n-A KUBE-B -j KUBE-NOPE\nCOMMIT\n")
	if err == nil {
		t.Fatal("restore succeeded")
	}
	if !f.HasChain("nat", "KUBE-A") || f.HasChain("filter", "KUBE-B") {
		t.Errorf("want nat committed and filter not:\n%s", f.Save(""))
	}
}

func TestNoflushDeclarationFlushesOnlyDeclaredChains(t *testing.T) {
	f := New()
	if err := restore(f, "*nat\n:KUBE-A - [0:0]\n:KUBE-B - [0:0]\n-A KUBE-A -j ACCEPT\n-A KUBE-B -j ACCEPT\n-A OUTPUT -j KUBE-A\nCOMMIT\n"); err != nil {
		t.Fatal(err)
	}
	if err := restore(f, "*nat\n:KUBE-A - [0:0]\n-A KUBE-A -p tcp -j RETURN\nCOMMIT\n"); err != nil {
		t.Fatal(err)
	}
	want := []string{"-A KUBE-A -p tcp -j RETURN"}
	if got := f.Rules("nat", "KUBE-A"); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("KUBE-A = %q, want %q", got, want)
	}
	if got := f.Rules("nat", "KUBE-B"); len(got) != 1 {
		t.Errorf("undeclared KUBE-B was touched: %q", got)
	}
	if got := f.Rules("nat", "OUTPUT"); len(got) != 1 {
		t.Errorf("built-in OUTPUT was flushed: %q", got)
	}
}

func TestJumpRulesAndQuoting(t *testing.T) {
	f := New()
	if err := f.Insert("nat", "OUTPUT", 1, "-m", "comment", "--comment", "a b", "-j", "KUBE-X"); err == nil {
		t.Fatal("inserting a jump to a missing chain succeeded")
	}
	if err := restore(f, "*nat\n:KUBE-X - [0:0]\nCOMMIT\n"); err != nil {
		t.Fatal(err)
	}
	if err := f.Append("nat", "OUTPUT", "-j", "ACCEPT"); err != nil {
		t.Fatal(err)
	}
	if err := f.Insert("nat", "OUTPUT", 1, "-m", "comment", "--comment", "a b", "-j", "KUBE-X"); err != nil {
		t.Fatal(err)
	}
	ok, err := f.Exists("nat", "OUTPUT", "-m", "comment", "--comment", "a b", "-j", "KUBE-X")
	if err != nil || !ok {
		t.Fatalf("Exists = %v, %v", ok, err)
	}
	if got := f.Rules("nat", "OUTPUT"); got[0] != `-A OUTPUT -m comment --comment "a b" -j KUBE-X` {
		t.Errorf("OUTPUT = %q: the insert is not first or not quoted like iptables-save", got)
	}
	// The same rule deleted through a restore with the save's quoting.
	if err := restore(f, "*nat\n-D OUTPUT -m comment --comment \"a b\" -j KUBE-X\n-X KUBE-X\nCOMMIT\n"); err != nil {
		t.Fatalf("deleting by the saved text: %v", err)
	}
	if f.HasChain("nat", "KUBE-X") {
		t.Error("KUBE-X survived -X")
	}
}
