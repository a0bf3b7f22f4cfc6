package syncscale

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"kproxy.dev/kproxy/redirect/kernel"
)

// kubeProxyTools are the commands kube-proxy's iptables mode runs, by name,
// from PATH.
func kubeProxyTools() []string {
	return []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"}
}

// KubeProxyLauncher prepares dir so that kube-proxy uses backend b: it
// fills dir with kube-proxy's iptables commands, each a link to b's
// multi-call binary (which acts by the name it is called by), checks that
// `iptables --version` there names b, and writes dir/kube-proxy, a script
// that runs bin with dir first on its PATH. It returns the script's path.
func KubeProxyLauncher(ctx context.Context, dir, bin string, b kernel.Backend) (string, error) {
	multi, err := exec.LookPath("xtables-" + string(b) + "-multi")
	if err != nil {
		return "", fmt.Errorf("finding the %s iptables binary for kube-proxy's PATH: %w", b, err)
	}
	for _, name := range kubeProxyTools() {
		if err := os.Symlink(multi, filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("linking %s for kube-proxy's PATH: %w", name, err)
		}
	}
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "iptables"), "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("%s/iptables --version: %w\n%s", dir, err, out)
	}
	if want := versionTag(b); !strings.Contains(string(out), want) {
		return "", fmt.Errorf("%s/iptables --version says %q, want the %s backend %s", dir, strings.TrimSpace(string(out)), b, want)
	}
	launcher := filepath.Join(dir, "kube-proxy")
	script := fmt.Sprintf("#!/bin/sh\nPATH=%s:\"$PATH\" exec %s \"$@\"\n", shellQuote(dir), shellQuote(bin))
	if err := os.WriteFile(launcher, []byte(script), 0o755); err != nil {
		return "", fmt.Errorf("writing the kube-proxy launcher: %w", err)
	}
	return launcher, nil
}

// versionTag is how `iptables --version` names a backend.
func versionTag(b kernel.Backend) string {
	if b == kernel.NFT {
		return "(nf_tables)"
	}
	return "(legacy)"
}

// shellQuote quotes s as one sh word.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
