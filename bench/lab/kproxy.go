package lab

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// KproxyBinaryEnv names a kproxy binary for tests to run instead of building
// one; InFreshNetns children receive it from their parent this way.
const KproxyBinaryEnv = "KPROXY_BINARY"

// buildKproxy builds cmd/kproxy once per test process: end-to-end tests run
// the real binary, as an operator would.
var buildKproxy = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "kproxy-test-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "kproxy")
	// go test puts its own toolchain first on PATH for the tests it runs.
	out, err := exec.Command("go", "build", "-o", bin, "kproxy.dev/kproxy/cmd/kproxy").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building kproxy: %w\n%s", err, out)
	}
	return bin, nil
})

// KproxyBinary returns the path of a kproxy binary built from this tree (or
// the one KproxyBinaryEnv names). Call it before InFreshNetns and pass
// KproxyBinaryEnv+"="+path to it, so the child does not build again.
func KproxyBinary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv(KproxyBinaryEnv); bin != "" {
		return bin
	}
	bin, err := buildKproxy()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}
