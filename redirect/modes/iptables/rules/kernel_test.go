package rules

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/testkit"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// TestKernelReadsBackTheSameText installs every scenario's full ruleset
// with iptables-restore, in a throwaway network namespace, for both
// backends, and checks that iptables-save prints every chain kproxy owns,
// and the jumps in the built-in chains, exactly as the model wrote them:
// the model's text is canonical, so a mode can compare a dump with what it
// built, as text.
func TestKernelReadsBackTheSameText(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: network namespaces and iptables")
	}
	for _, sc := range scenarios() {
		for _, be := range kernel.Backends() {
			t.Run(sc.Name+"/"+string(be), func(t *testing.T) {
				fam := sc.Config.Family
				if _, err := exec.LookPath(be.RestoreCommand(fam)); err != nil {
					t.Skipf("%s not installed", be.RestoreCommand(fam))
				}
				b := mustBuilder(t, sc.Config)
				ports := mustPorts(t, b, sc.Ports...)
				save, err := restoreAndSave(be, fam, renderRestore(b, ports))
				if err != nil {
					t.Fatal(err)
				}
				got, err := parseSave(save)
				if err != nil {
					t.Fatalf("%v\n%s", err, save)
				}
				want := assemble(b, ports)
				for _, tbl := range tableOrder() {
					compareTable(t, tbl, got[tbl], append(slices.Clone(want.jumps[tbl]), want.chains[tbl]...))
				}
			})
		}
	}
}

// restoreAndSave runs restore with payload in a new network namespace and
// returns what save then prints.
func restoreAndSave(be kernel.Backend, fam ipfamily.Family, payload string) (string, error) {
	var save string
	var runErr error
	err := kernel.ThreadSandbox{}.Do(func() {
		restore := exec.Command(be.RestoreCommand(fam), "--noflush")
		restore.Stdin = strings.NewReader(payload)
		if out, err := restore.CombinedOutput(); err != nil {
			runErr = fmt.Errorf("%s: %v\n%s\npayload:\n%s", be.RestoreCommand(fam), err, out, numbered(payload))
			return
		}
		var stderr bytes.Buffer
		cmd := exec.Command(be.SaveCommand(fam))
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			runErr = fmt.Errorf("%s: %v\n%s", be.SaveCommand(fam), err, stderr.String())
			return
		}
		save = string(out)
	})
	if err != nil {
		return "", err
	}
	return save, runErr
}

// savedTable is one table of an iptables-save dump: its chains in order,
// each with its rules.
type savedTable []Chain

// parseSave reads an iptables-save dump into tables.
func parseSave(save string) (map[Table]savedTable, error) {
	tables := map[Table]savedTable{}
	var cur Table
	for _, line := range strings.Split(save, "\n") {
		switch {
		case line == "" || strings.HasPrefix(line, "#") || line == "COMMIT":
		case strings.HasPrefix(line, "*"):
			cur = Table(line[1:])
			tables[cur] = savedTable{}
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			tables[cur] = append(tables[cur], Chain{Table: cur, Name: name})
		case strings.HasPrefix(line, "-A "):
			name, rule, _ := strings.Cut(line[len("-A "):], " ")
			i := indexOfChain(tables[cur], name)
			if i < 0 {
				return nil, fmt.Errorf("rule in undeclared chain %s: %q", name, line)
			}
			tables[cur][i].Rules = append(tables[cur][i].Rules, rule)
		default:
			return nil, fmt.Errorf("unexpected line in iptables-save output: %q", line)
		}
	}
	return tables, nil
}

// compareTable checks that the dump holds exactly the wanted chains with
// exactly their rules, in order, and no other rules. Built-in chains the
// model does not touch must be empty.
func compareTable(t *testing.T, tbl Table, got savedTable, want []Chain) {
	t.Helper()
	for _, w := range want {
		i := indexOfChain(got, w.Name)
		if i < 0 {
			t.Errorf("%s table: chain %s missing from iptables-save", tbl, w.Name)
			continue
		}
		if g := got[i].Rules; !slices.Equal(g, w.Rules) {
			t.Errorf("%s table, chain %s: iptables-save shows\n%s\nthe model wrote\n%s\ndiff:\n%s", tbl, w.Name,
				strings.Join(g, "\n"), strings.Join(w.Rules, "\n"), testkit.LineDiff(strings.Join(w.Rules, "\n"), strings.Join(g, "\n")))
		}
	}
	for _, g := range got {
		if indexOfChain(want, g.Name) < 0 && (len(g.Rules) > 0 || !isBuiltin(g.Name)) {
			t.Errorf("%s table: iptables-save shows chain %s (%d rules) the model did not write", tbl, g.Name, len(g.Rules))
		}
	}
}

func isBuiltin(chain string) bool {
	switch chain {
	case "PREROUTING", "INPUT", "FORWARD", "OUTPUT", "POSTROUTING":
		return true
	}
	return false
}

// numbered prefixes each line with its number, as restore errors name lines.
func numbered(s string) string {
	var sb strings.Builder
	for i, l := range strings.Split(s, "\n") {
		fmt.Fprintf(&sb, "%4d %s\n", i+1, l)
	}
	return sb.String()
}
