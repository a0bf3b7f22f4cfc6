package modes

import (
	"os"
	"testing"

	"kproxy.dev/kproxy/bench/modes/load"
)

// TestMain lets the load generators re-execute this test binary as their
// child processes (load.ChildMain returns only in the test process).
func TestMain(m *testing.M) {
	load.ChildMain()
	os.Exit(m.Run())
}
