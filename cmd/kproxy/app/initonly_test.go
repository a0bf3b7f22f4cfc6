package app

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

func readSysctl(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func writeSysctl(t *testing.T, name, value string) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/"+name, []byte(value), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestInitOnly: --init-only sets the sysctls kube-proxy's --init-only sets
// (the conntrack ones, the mode's route_localnet) and returns without
// syncing: no rule, no port bound, no API server asked (there is none).
func TestInitOnly(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	writeSysctl(t, "net/ipv4/conf/all/route_localnet", "0")
	writeSysctl(t, "net/netfilter/nf_conntrack_tcp_timeout_established", "600")
	before := lab.WithoutComments(lab.Run(t, "iptables-nft-save"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := Run(ctx, config(t, "--init-only", "--proxy-mode=iptables")); err != nil {
		t.Fatalf("--init-only: %v", err)
	}
	t.Logf("--init-only returned after %v", time.Since(start))
	for name, want := range map[string]string{
		"net/ipv4/conf/all/route_localnet":                   "1",     // --iptables-localhost-nodeports (default true)
		"net/netfilter/nf_conntrack_tcp_timeout_established": "86400", // --conntrack-tcp-timeout-established 24h
	} {
		if got := readSysctl(t, name); got != want {
			t.Errorf("%s = %s after --init-only, want %s", name, got, want)
		}
	}
	if after := lab.WithoutComments(lab.Run(t, "iptables-nft-save")); after != before {
		t.Errorf("--init-only wrote rules:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	if code, body := get(t, healthzURL+"/healthz"); code != 0 {
		t.Errorf("the healthz port answers after --init-only returned: %d %s", code, body)
	}
}
