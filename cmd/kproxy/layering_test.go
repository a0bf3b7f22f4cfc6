package main

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"
)

const module = "kproxy.dev/kproxy/"

// floors are the rooms of the tree (a path's first element under the
// module) and the rooms each may import. Imports run down only: cmd →
// redirect → lb, conntrack → sync; lb and conntrack do not import each
// other; sync imports only sync. DEVELOPERS.md says what each room holds.
func floors() map[string][]string {
	return map[string][]string{
		"sync":      {"sync"},
		"lb":        {"lb", "sync"},
		"conntrack": {"conntrack", "sync"},
		"redirect":  {"redirect", "lb", "conntrack", "sync"},
		"cmd":       {"cmd", "redirect", "lb", "conntrack", "sync"},
	}
}

// testFloor is what tests may import besides their room's floors: the lab
// and the test kit. bench itself (benchmarks, end-to-end cases, tooling)
// may import anything and is not checked.
const testFloor = "bench"

// TestImportsRunDown lists every package of the module with `go list` and
// fails naming each import that runs up a floor or sideways between lb and
// conntrack.
func TestImportsRunDown(t *testing.T) {
	cmd := exec.Command("go", "list", "-f",
		`{{.ImportPath}}|{{join .Imports " "}}|{{join .TestImports " "}} {{join .XTestImports " "}}`,
		module+"...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	rooms := floors()
	var up []string
	checked := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), "|")
		if len(fields) != 3 {
			t.Fatalf("go list printed %q", sc.Text())
		}
		pkg := fields[0]
		from := room(pkg)
		if from == testFloor {
			continue
		}
		allowed, ok := rooms[from]
		if !ok {
			up = append(up, pkg+" is in no room (want one of cmd, redirect, lb, conntrack, sync)")
			continue
		}
		checked++
		for _, imp := range strings.Fields(fields[1]) {
			if to := room(imp); to != "" && !slices.Contains(allowed, to) {
				up = append(up, pkg+" -> "+imp)
			}
		}
		for _, imp := range strings.Fields(fields[2]) {
			if to := room(imp); to != "" && to != testFloor && !slices.Contains(allowed, to) {
				up = append(up, pkg+" (tests) -> "+imp)
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if checked == 0 {
		t.Fatal("go list found no packages to check")
	}
	sort.Strings(up)
	for _, u := range up {
		t.Errorf("import does not run down a floor: %s", u)
	}
}

// room is the module room of an import path; "" outside the module.
func room(path string) string {
	rest, ok := strings.CutPrefix(path, module)
	if !ok {
		return ""
	}
	r, _, _ := strings.Cut(rest, "/")
	return r
}
