package lab

import (
	"os"
	"path/filepath"
	"testing"
)

// KubeProxyBinary returns the reference kube-proxy (v1.36, built by `make
// tools` into the tools directory, see ToolsBinDir), failing the test with
// how to build it when it is missing. Run it on a host with Host.Start,
// against StartAPIServer's KubeconfigPath; it waits up to 30 s for its Node
// to have an address, which CreateNode gives it.
func KubeProxyBinary(t testing.TB) string {
	t.Helper()
	bin := filepath.Join(ToolsBinDir(t), "kube-proxy")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("kube-proxy not found: run `make tools` (or `make test`) to build it: %v", err)
	}
	return bin
}
