// Package ownedtest checks a mode's owned.Objects against what its golden
// files show it creating, so a new chain or set cannot be left out of
// cleanup unnoticed.
package ownedtest

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kproxy.dev/kproxy/redirect/cleanup/owned"
)

// Created lists what the golden text creates: chains declared (":NAME")
// under each "*table" header, and ipsets named by "--match-set NAME" or
// listed, unindented, under a "# sets" header.
func Created(text string) (chains []owned.Chain, sets []string) {
	table, inSets := "", false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "*"):
			table = strings.TrimPrefix(line, "*")
		case strings.HasPrefix(line, "# "):
			inSets = strings.HasPrefix(line, "# sets")
		case strings.HasPrefix(line, ":") && table != "":
			chains = append(chains, owned.Chain{Table: table, Name: strings.Fields(line[1:])[0]})
		case inSets && line != "" && line[0] != ' ':
			sets = append(sets, strings.Fields(line)[0])
		}
		words := strings.Fields(line)
		for i := 0; i+1 < len(words); i++ {
			if words[i] == "--match-set" {
				sets = append(sets, words[i+1])
			}
		}
	}
	return chains, sets
}

// CheckGolden fails t for every chain or set the golden files under dir
// (recursively, "*.golden") create that o does not own. notOwned are chains
// the mode writes but others own (kubelet's KUBE-FIREWALL), which cleanup
// must leave alone. It fails when dir holds no golden file, or they
// create nothing, so a moved testdata folder cannot pass silently.
func CheckGolden(t *testing.T, dir string, o owned.Objects, notOwned ...owned.Chain) {
	t.Helper()
	var files, created int
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".golden") {
			return err
		}
		files++
		text, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		chains, sets := Created(string(text))
		created += len(chains) + len(sets)
		for _, c := range chains {
			if !o.HasChain(c.Table, c.Name) && !contains(notOwned, c) {
				t.Errorf("%s creates chain %s in table %s, which the mode's Owned() lacks: cleanup would leave it", path, c.Name, c.Table)
			}
		}
		for _, s := range sets {
			if !o.HasSet(s) {
				t.Errorf("%s uses ipset %s, which the mode's Owned() lacks: cleanup would leave it", path, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("reading the golden files under %s: %v", dir, err)
	}
	if files == 0 || created == 0 {
		t.Fatalf("the %d golden files under %s create no chain or set: nothing was checked", files, dir)
	}
	t.Logf("checked %d chains and sets in %d golden files", created, files)
}

func contains(cs []owned.Chain, c owned.Chain) bool {
	for _, x := range cs {
		if x.Table == c.Table && x.Name == c.Name {
			return true
		}
	}
	return false
}
