package rules

import (
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// TestGolden renders every scenario to a full restore payload and compares
// it, as text, with testdata/<scenario>.golden.
func TestGolden(t *testing.T) {
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			b := mustBuilder(t, sc.cfg)
			got := renderRestore(b, mustPorts(t, b, sc.ports...))
			path := filepath.Join("testdata", sc.name+".golden")
			if *update {
				if err := os.MkdirAll("testdata", 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("reading the golden file (run with -update to create it): %v", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from the rendered rules (run with -update to accept):\n%s", path, lineDiff(string(want), got))
			}
		})
	}
}
