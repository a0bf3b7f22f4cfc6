package options

import (
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
)

// parsed registers kproxy's flags on a fresh flag set and parses args.
func parsed(t *testing.T, args ...string) (*Options, *pflag.FlagSet, error) {
	t.Helper()
	o := NewOptions()
	o.Hostname = func() (string, error) { return "Node-A.Example", nil }
	o.Logger = logr.Discard()
	fs := pflag.NewFlagSet("kproxy", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	o.AddFlags(fs)
	return o, fs, fs.Parse(args)
}

// complete runs the whole flag + file + validation pipeline.
func complete(t *testing.T, args ...string) (*Config, error) {
	t.Helper()
	o, fs, err := parsed(t, args...)
	if err != nil {
		return nil, err
	}
	return o.Complete(fs)
}

func mustComplete(t *testing.T, args ...string) *Config {
	t.Helper()
	cfg, err := complete(t, args...)
	if err != nil {
		t.Fatalf("args %q: unexpected error: %v", args, err)
	}
	return cfg
}

func writeTemp(t *testing.T, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const header = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"

func equal(a, b any) bool { return cmp.Equal(a, b, cmpOpts()...) }

func cmpOpts() []cmp.Option {
	return []cmp.Option{
		cmp.Comparer(func(x, y netip.Addr) bool { return x == y }),
		cmp.Comparer(func(x, y netip.Prefix) bool { return x == y }),
	}
}
