package testkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// UpdateEnv names the environment variable that makes Golden rewrite the
// golden files instead of comparing: KPROXY_UPDATE_GOLDEN=1 go test ./pkg.
// An environment variable rather than a -update flag, so one command can
// update every package (`go test ./... -update` fails in packages without
// the flag) and no package needs a flag global.
const UpdateEnv = "KPROXY_UPDATE_GOLDEN"

// Updating says whether this run rewrites golden files.
func Updating() bool { return os.Getenv(UpdateEnv) == "1" }

// Golden compares got, as text, with the file at path (conventionally
// testdata/<name>.golden). With KPROXY_UPDATE_GOLDEN=1 it writes got there
// instead, creating the directory. A mismatch fails the test with a diff.
func Golden(t testing.TB, path, got string) {
	t.Helper()
	if Updating() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading the golden file (%s=1 go test creates it): %v", UpdateEnv, err)
	}
	if diff := cmp.Diff(string(want), got); diff != "" {
		t.Errorf("%s differs (-want +got; check, then %s=1 go test rewrites it):\n%s", path, UpdateEnv, diff)
	}
}

// LineDiff lists the lines only in want ("-") and only in got ("+"), in
// order, ignoring where a line moved: enough to see what changed in a rule
// listing whose order another check covers.
func LineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	inWant, inGot := lineCounts(w), lineCounts(g)
	var sb strings.Builder
	for _, l := range w {
		if inGot[l] > 0 {
			inGot[l]--
			continue
		}
		sb.WriteString("- " + l + "\n")
	}
	for _, l := range g {
		if inWant[l] > 0 {
			inWant[l]--
			continue
		}
		sb.WriteString("+ " + l + "\n")
	}
	if sb.Len() == 0 {
		return "(same lines, different order)\n--- want\n" + want + "\n--- got\n" + got
	}
	return sb.String()
}

func lineCounts(lines []string) map[string]int {
	m := map[string]int{}
	for _, l := range lines {
		m[l]++
	}
	return m
}
