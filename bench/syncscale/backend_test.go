package syncscale

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

func TestKubeProxyLauncher(t *testing.T) {
	// A stand-in kube-proxy that reports which iptables its PATH finds.
	fake := filepath.Join(t.TempDir(), "fake kube-proxy")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho \"$@\"; command -v iptables; iptables --version\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, b := range kernel.Backends() {
		t.Run(string(b), func(t *testing.T) {
			dir := t.TempDir()
			launcher, err := KubeProxyLauncher(context.Background(), dir, fake, b)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range kubeProxyTools() {
				target, err := os.Readlink(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if filepath.Base(target) != "xtables-"+string(b)+"-multi" {
					t.Errorf("%s links to %s, want the %s multi-call binary", name, target, b)
				}
			}
			out, err := exec.Command(launcher, "--proxy-mode=iptables", "--v=2").CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", launcher, err, out)
			}
			want := "--proxy-mode=iptables --v=2\n" + filepath.Join(dir, "iptables") + "\n"
			if !strings.HasPrefix(string(out), want) || !strings.Contains(string(out), versionTag(b)) {
				t.Errorf("the launched command printed\n%s\nwant its arguments, %s/iptables and %s", out, dir, versionTag(b))
			}
			if _, err := KubeProxyLauncher(context.Background(), dir, fake, b); err == nil {
				t.Error("KubeProxyLauncher over existing links succeeded")
			}
		})
	}
}

// TestBackendChoice checks the premise of the legacy rows: in a fresh
// namespace kproxy's probe picks nft, and after MarkBackend(legacy) it
// picks legacy.
func TestBackendChoice(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	ctx := context.Background()
	if got := kernel.Detect(ctx, false).Backend; got != kernel.NFT {
		t.Fatalf("fresh namespace: kproxy picks %q, want nft", got)
	}
	if err := MarkBackend(ctx, kernel.NFT); err != nil {
		t.Fatal(err)
	}
	if got := kernel.Detect(ctx, false).Backend; got != kernel.NFT {
		t.Fatalf("after MarkBackend(nft): kproxy picks %q, want nft", got)
	}
	if err := MarkBackend(ctx, kernel.Legacy); err != nil {
		t.Fatal(err)
	}
	if got := kernel.Detect(ctx, false).Backend; got != kernel.Legacy {
		t.Fatalf("after MarkBackend(legacy): kproxy picks %q, want legacy", got)
	}
	dump, _, err := SaveDump(ctx, kernel.Legacy)
	if err != nil {
		t.Fatal(err)
	}
	if dump["mangle"].Chains == 0 || dump.ProxyLines() != 0 {
		t.Errorf("the legacy mark shows as %+v; want a mangle chain that is no proxy's", dump)
	}
}

// TestVerifyBackend writes proxy-like rules to one backend and checks what
// VerifyBackend and ListChain see.
func TestVerifyBackend(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	ctx := context.Background()
	restore := func(b kernel.Backend, rules string) {
		t.Helper()
		cmd := exec.Command(b.RestoreCommand(ipfamily.IPv4), "--noflush")
		cmd.Stdin = strings.NewReader(rules)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", b.RestoreCommand(ipfamily.IPv4), err, out)
		}
	}
	restore(kernel.NFT, `*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-A - [0:0]
:KUBE-SVC-B - [0:0]
:KUBE-SEP-A1 - [0:0]
-A KUBE-SERVICES -d 198.18.1.0/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-A
-A KUBE-SERVICES -d 198.18.1.1/32 -p tcp -m tcp --dport 80 -j KUBE-SVC-B
-A KUBE-SVC-A -j KUBE-SEP-A1
COMMIT
`)
	if _, err := VerifyBackend(ctx, kernel.NFT, 2); err != nil {
		t.Errorf("VerifyBackend(nft, 2 services): %v", err)
	}
	if _, err := VerifyBackend(ctx, kernel.NFT, 3); err == nil || !strings.Contains(err.Error(), "want at least 3") {
		t.Errorf("VerifyBackend(nft, 3 services) = %v, want too few jumps", err)
	}
	if _, err := VerifyBackend(ctx, kernel.Legacy, 1); err == nil {
		t.Error("VerifyBackend(legacy) succeeded with the rules in nft")
	}
	out, err := ListChain(ctx, kernel.NFT, "KUBE-SVC-A")
	if err != nil || !strings.Contains(out, "-A KUBE-SVC-A -j KUBE-SEP-A1\n") {
		t.Errorf("ListChain(KUBE-SVC-A) = %q, %v", out, err)
	}
	if _, err := ListChain(ctx, kernel.NFT, "KUBE-SVC-MISSING"); err == nil {
		t.Error("ListChain of a missing chain succeeded")
	}

	restore(kernel.Legacy, "*nat\n:KUBE-SVC-STRAY - [0:0]\nCOMMIT\n")
	if _, err := VerifyBackend(ctx, kernel.NFT, 2); err == nil || !strings.Contains(err.Error(), "legacy") {
		t.Errorf("VerifyBackend(nft) with a proxy chain in legacy = %v, want it named", err)
	}
}
