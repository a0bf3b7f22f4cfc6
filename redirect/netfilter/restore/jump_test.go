package restore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// recordingJumps is a JumpRules holding chains as lists of joined rules; it
// fails any call on a chain listed in broken.
type recordingJumps struct {
	chains map[string][]string // "table/chain" -> rules
	broken map[string]error
}

func (r *recordingJumps) key(table, chain string) (string, error) {
	k := table + "/" + chain
	return k, r.broken[k]
}

func (r *recordingJumps) Exists(table, chain string, spec ...string) (bool, error) {
	k, err := r.key(table, chain)
	if err != nil {
		return false, err
	}
	return slices.Contains(r.chains[k], strings.Join(spec, " ")), nil
}

func (r *recordingJumps) Insert(table, chain string, pos int, spec ...string) error {
	k, err := r.key(table, chain)
	if err != nil {
		return err
	}
	if pos != 1 {
		return fmt.Errorf("insert at %d, want 1", pos)
	}
	r.chains[k] = slices.Insert(r.chains[k], 0, strings.Join(spec, " "))
	return nil
}

func (r *recordingJumps) Append(table, chain string, spec ...string) error {
	k, err := r.key(table, chain)
	if err != nil {
		return err
	}
	r.chains[k] = append(r.chains[k], strings.Join(spec, " "))
	return nil
}

func TestEnsureJumps(t *testing.T) {
	jumps := []Jump{
		{Table: "nat", Chain: "PREROUTING", First: true, Args: []string{"-j", "KUBE-A"}},
		{Table: "nat", Chain: "PREROUTING", First: true, Args: []string{"-j", "KUBE-B"}},
		{Table: "nat", Chain: "PREROUTING", Args: []string{"-m", "addrtype", "--dst-type", "LOCAL", "-j", "KUBE-LAST"}},
		{Table: "filter", Chain: "INPUT", Args: []string{"-j", "KUBE-F"}},
	}
	cases := []struct {
		name      string
		have      map[string][]string
		broken    map[string]error
		wantChain map[string][]string
		wantAdded []string // targets
		wantErr   string
	}{
		{
			name: "all missing: First ones inserted, so the last listed is on top",
			have: map[string][]string{"nat/PREROUTING": {"-j OTHER"}},
			wantChain: map[string][]string{
				"nat/PREROUTING": {"-j KUBE-B", "-j KUBE-A", "-j OTHER", "-m addrtype --dst-type LOCAL -j KUBE-LAST"},
				"filter/INPUT":   {"-j KUBE-F"},
			},
			wantAdded: []string{"KUBE-A", "KUBE-B", "KUBE-LAST", "KUBE-F"},
		},
		{
			name: "present ones are left alone",
			have: map[string][]string{"nat/PREROUTING": {"-j KUBE-B", "-j KUBE-A", "-m addrtype --dst-type LOCAL -j KUBE-LAST"}},
			wantChain: map[string][]string{
				"nat/PREROUTING": {"-j KUBE-B", "-j KUBE-A", "-m addrtype --dst-type LOCAL -j KUBE-LAST"},
				"filter/INPUT":   {"-j KUBE-F"},
			},
			wantAdded: []string{"KUBE-F"},
		},
		{
			name:      "a failure names table, chain and target and keeps what was added",
			have:      map[string][]string{},
			broken:    map[string]error{"filter/INPUT": errors.New("iptables: Resource temporarily unavailable.")},
			wantChain: map[string][]string{"nat/PREROUTING": {"-j KUBE-B", "-j KUBE-A", "-m addrtype --dst-type LOCAL -j KUBE-LAST"}},
			wantAdded: []string{"KUBE-A", "KUBE-B", "KUBE-LAST"},
			wantErr:   "checking the jump to KUBE-F in filter/INPUT: iptables: Resource temporarily unavailable.",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			jr := &recordingJumps{chains: tc.have, broken: tc.broken}
			added, err := EnsureJumps(jr, jumps)
			if (err == nil) != (tc.wantErr == "") || (err != nil && err.Error() != tc.wantErr) {
				t.Fatalf("EnsureJumps error = %v, want %q", err, tc.wantErr)
			}
			var targets []string
			for _, j := range added {
				targets = append(targets, j.Target())
			}
			if !slices.Equal(targets, tc.wantAdded) {
				t.Errorf("added %v, want %v", targets, tc.wantAdded)
			}
			for k, want := range tc.wantChain {
				if got := jr.chains[k]; !slices.Equal(got, want) {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestJumpTarget(t *testing.T) {
	cases := map[string]Jump{
		"KUBE-A":    {Args: []string{"-m", "comment", "--comment", "x -j y", "-j", "KUBE-A"}},
		"KUBE-G":    {Args: []string{"-g", "KUBE-G"}},
		"last-word": {Args: []string{"-p", "tcp", "last-word"}},
		"":          {},
	}
	for want, j := range cases {
		if got := j.Target(); got != want {
			t.Errorf("Target(%q) = %q, want %q", j.Args, got, want)
		}
	}
}
