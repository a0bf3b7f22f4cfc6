package restore

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// testdata/{nft,legacy}.save are what iptables-nft-save and iptables-save
// 1.8.9 printed (nat plain, filter with -c) after restoring the same rules.
func TestParseSaveOfRealOutput(t *testing.T) {
	builtin := func(names ...string) []SavedChain {
		var out []SavedChain
		for _, n := range names {
			out = append(out, SavedChain{Name: n, Policy: "ACCEPT"})
		}
		return out
	}
	type rule struct{ Chain, Spec string }
	want := []struct {
		name   string
		chains []SavedChain
		rules  []rule
	}{
		{
			"nat",
			append(builtin("PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"), SavedChain{"KUBE-SERVICES", "-"}, SavedChain{"KUBE-SVC-X", "-"}),
			[]rule{
				{"OUTPUT", `-m comment --comment "kubernetes service portals" -j KUBE-SERVICES`},
				{"KUBE-SERVICES", `-d 198.18.0.10/32 -p tcp -m comment --comment "ns/web:http cluster IP" -m tcp --dport 80 -j KUBE-SVC-X`},
				{"KUBE-SVC-X", `-m comment --comment plain_word-1 -j RETURN`},
				{"KUBE-SVC-X", `-m comment --comment "it\'s \"quoted\" back\\slash" -j RETURN`},
			},
		},
		{
			"filter",
			append(builtin("INPUT", "FORWARD", "OUTPUT"), SavedChain{"KUBE-FORWARD", "-"}),
			[]rule{
				{"FORWARD", `-m comment --comment "kubernetes forwarding rules" -j KUBE-FORWARD`},
				{"KUBE-FORWARD", `-m conntrack --ctstate INVALID -j DROP`},
			},
		},
	}
	for _, file := range []string{"nft.save", "legacy.save"} {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", file))
			if err != nil {
				t.Fatal(err)
			}
			tables, err := ParseSave(string(b))
			if err != nil {
				t.Fatal(err)
			}
			if len(tables) != len(want) {
				t.Fatalf("%d tables, want %d", len(tables), len(want))
			}
			for i, w := range want {
				got := tables[i]
				var rules []rule
				for _, r := range got.Rules {
					if !strings.HasPrefix(r.Line, "-A "+r.Chain+" ") {
						t.Errorf("rule line %q does not start with -A %s", r.Line, r.Chain)
					}
					rules = append(rules, rule{r.Chain, r.Spec()})
				}
				if diff := cmp.Diff(w.name, got.Name); diff != "" {
					t.Errorf("table name (-want +got):\n%s", diff)
				}
				if diff := cmp.Diff(w.chains, got.Chains); diff != "" {
					t.Errorf("%s chains (-want +got):\n%s", w.name, diff)
				}
				if diff := cmp.Diff(w.rules, rules); diff != "" {
					t.Errorf("%s rules (-want +got):\n%s", w.name, diff)
				}
			}
			words, err := tables[0].Rules[3].Words()
			if want := []string{"-m", "comment", "--comment", `it's "quoted" back\slash`, "-j", "RETURN"}; err != nil || !cmp.Equal(want, words) {
				t.Errorf("Words() = %q, %v; want %q", words, err, want)
			}
			// What FormatSave prints reads back the same.
			again, err := ParseSave(FormatSave(tables...))
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tables, again, cmp.AllowUnexported(SavedRule{})); diff != "" {
				t.Errorf("ParseSave(FormatSave(t)) (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseSaveRefuses(t *testing.T) {
	for name, save := range map[string]string{
		"no COMMIT":            "*nat\n:KUBE-A - [0:0]\n",
		"nested table":         "*nat\n*filter\nCOMMIT\n",
		"outside a table":      "-A OUTPUT -j KUBE-SERVICES\n",
		"bad chain line":       "*nat\n:KUBE-SERVICES\nCOMMIT\n",
		"unknown command line": "*nat\n-I OUTPUT -j KUBE-SERVICES\nCOMMIT\n",
		"bad counters":         "*nat\n[0:0]-A OUTPUT -j X\nCOMMIT\n",
	} {
		if tables, err := ParseSave(save); err == nil {
			t.Errorf("%s: ParseSave(%q) = %v, want an error", name, save, tables)
		}
	}
}

func TestNewSavedRule(t *testing.T) {
	for _, tc := range []struct{ chain, spec, line string }{
		{"KUBE-A", "-j RETURN", "-A KUBE-A -j RETURN"},
		{"KUBE-A", "", "-A KUBE-A"},
	} {
		r := NewSavedRule(tc.chain, tc.spec)
		if r.Line != tc.line || r.Spec() != tc.spec || r.Chain != tc.chain {
			t.Errorf("NewSavedRule(%q, %q) = %+v (spec %q), want line %q", tc.chain, tc.spec, r, r.Spec(), tc.line)
		}
	}
}

func TestLines(t *testing.T) {
	text := "# Generated\n*nat\n:KUBE-A - [0:0]\n  -A KUBE-A -j RETURN \n\n-X KUBE-B\nCOMMIT\n"
	want := []Line{
		{1, BlankLine, "# Generated"},
		{2, TableLine, "*nat"},
		{3, ChainLine, ":KUBE-A - [0:0]"},
		{4, CommandLine, "-A KUBE-A -j RETURN"},
		{5, BlankLine, ""},
		{6, CommandLine, "-X KUBE-B"},
		{7, CommitLine, "COMMIT"},
	}
	var got []Line
	for l := range Lines(text) {
		got = append(got, l)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Lines (-want +got):\n%s", diff)
	}
	n := 0
	for range Lines("") {
		n++
	}
	if n != 1 {
		t.Errorf("Lines(\"\") yields %d lines, want 1 (blank)", n)
	}
}
