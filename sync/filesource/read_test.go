package filesource

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestReadIsNeverTorn reads a file that another goroutine rewrites in place
// (truncates, then writes) as fast as it can, as a non-atomic editor saves
// it. Every read either returns the whole content or fails (the file keeps
// its last good version): a read that returned the part before a truncation
// would apply a prefix, whose last document may parse and say, for
// example, that a service has no endpoints.
func TestReadIsNeverTorn(t *testing.T) {
	path := filepath.Join(t.TempDir(), "services.yaml")
	// Larger than a first read's buffer, so a read takes several calls.
	content := strings.Repeat(validService+"---\n", 40)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writeErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
			if err == nil {
				_, err = f.WriteString(content)
				if cerr := f.Close(); err == nil {
					err = cerr
				}
			}
			if err != nil {
				writeErr = err
				return
			}
		}
	}()
	const reads = 5000
	whole, refused := 0, 0
	for i := range reads {
		data, err := readLimited(path, maxFileSize)
		switch {
		case errors.Is(err, errSaveInProgress):
			refused++
		case err != nil:
			t.Fatalf("read %d: %v", i, err)
		case len(data) == 0:
			refused++ // empty: never applied (errEmpty)
		case string(data) != content:
			t.Fatalf("read %d returned %d of the file's %d bytes: a torn read", i, len(data), len(content))
		default:
			whole++
		}
	}
	close(stop)
	wg.Wait()
	if writeErr != nil {
		t.Fatal(writeErr)
	}
	t.Logf("%d reads: %d whole, %d refused or empty", reads, whole, refused)
}

// TestSaveHeldOpenIsReadWhenItEnds keeps the file open for writing longer
// than the source waits for a save to end: the read it then makes is
// refused, and the file must be read again as soon as the writer closes it,
// although closing a file sends no event (the next resync is 30 s away).
func TestSaveHeldOpenIsReadWhenItEnds(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "services.yaml")
	a, b := service("default", "a", "198.18.0.10", 80), service("default", "b", "198.18.0.11", 80)
	writeFile(t, dir, "services.yaml", yamlDocs(t, a))
	h := startWatching(t, path) // a 20 ms debounce: the source waits 1 s for a save
	h.waitFor("initial load", []string{"Service default/a 198.18.0.10:80"})

	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(yamlDocs(t, a, b)); err != nil {
		t.Fatal(err)
	}
	for r := h.waitReload(); !r.heldForSave(); r = h.waitReload() {
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	h.waitFor("after the save", []string{"Service default/a 198.18.0.10:80", "Service default/b 198.18.0.11:80"})
}
