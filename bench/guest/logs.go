package guest

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// logTail is how much of each log a failed run quotes.
const logTail = 4 << 10

// withLogs appends the ends of the guest console (kernel messages, the
// init's own errors) and of UML's output to err: a failed boot is
// diagnosed from them.
func withLogs(err error, runDir string) error {
	var b strings.Builder
	for _, name := range []string{"console.log", "uml.log"} {
		tail := readTail(filepath.Join(runDir, name), logTail)
		if tail == "" {
			continue
		}
		fmt.Fprintf(&b, "\n--- end of %s ---\n%s", name, tail)
	}
	if b.Len() == 0 {
		return err
	}
	return fmt.Errorf("%w%s", err, b.String())
}

// readTail returns up to the last n bytes of a file, "" when unreadable.
func readTail(path string, n int64) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	if st.Size() > n {
		if _, err := f.Seek(-n, io.SeekEnd); err != nil {
			return ""
		}
	}
	data, _ := io.ReadAll(f)
	return strings.TrimRight(string(data), "\n")
}
