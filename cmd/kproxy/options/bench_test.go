package options

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/spf13/pflag"
)

// BenchmarkCompleteWithConfigFile measures start-up configuration: parsing
// flags, reading a --config file, merging and validating.
func BenchmarkCompleteWithConfigFile(b *testing.B) {
	path := filepath.Join(b.TempDir(), "c.yaml")
	content := header + "mode: iptables\nclusterCIDR: 198.19.0.0/16,fd00::/64\nnodePortAddresses: [198.19.0.0/24]\n"
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		b.Fatal(err)
	}
	args := []string{"--config", path, "--proxy-mode=ipvs", "--ipvs-scheduler=wrr", "--hostname-override=n1"}
	for b.Loop() {
		o := NewOptions()
		fs := pflag.NewFlagSet("kproxy", pflag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			b.Fatal(err)
		}
		if _, err := o.Complete(fs); err != nil {
			b.Fatal(err)
		}
	}
}
