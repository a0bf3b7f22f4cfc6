package nftables

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestOwnedCoversGoldenOutput: everything the golden dumps create lives in
// the kube-proxy table of family ip or ip6, which Owned() lists, so cleanup
// removes all of it by deleting the two tables.
func TestOwnedCoversGoldenOutput(t *testing.T) {
	if !slices.Contains(Owned().NFTables, TableName) {
		t.Fatalf("Owned() lacks table %s", TableName)
	}
	files, _ := filepath.Glob("testdata/scenarios/*.golden")
	if len(files) == 0 {
		t.Fatal("no golden file: nothing checked")
	}
	objects := 0
	for _, path := range files {
		text, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(text), "\n") {
			if !strings.HasPrefix(line, "add ") {
				continue
			}
			f := strings.Fields(line)
			if len(f) < 4 || (f[2] != "ip" && f[2] != "ip6") || f[3] != TableName {
				t.Errorf("%s: %q is outside the ip and ip6 %s tables cleanup removes", path, line, TableName)
			}
			objects++
		}
	}
	t.Logf("checked %d objects in %d golden files", objects, len(files))
}
