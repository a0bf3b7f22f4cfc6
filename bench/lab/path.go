package lab

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// PathWithout returns a PATH for a node that lacks the programs named: one
// directory linking every other program on the current PATH. Tests use it
// to run kproxy where a tool is not installed.
func PathWithout(tb testing.TB, hide ...string) string {
	tb.Helper()
	dir := tb.TempDir()
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if slices.Contains(hide, e.Name()) {
				continue
			}
			link := filepath.Join(dir, e.Name())
			if _, err := os.Lstat(link); err == nil {
				continue // an earlier PATH entry wins
			}
			if err := os.Symlink(filepath.Join(d, e.Name()), link); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return dir
}
