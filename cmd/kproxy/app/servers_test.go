package app

import (
	"context"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// TestMetricsPortTakenWithoutHardFail: without --bind-address-hard-fail (the
// default) a metrics port in use does not stop kproxy, as it does not stop
// kube-proxy: it proxies and serves healthz, and binds the metrics port once
// it is free (kube-proxy retries every 5 s).
func TestMetricsPortTakenWithoutHardFail(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	ln, err := net.Listen("tcp", "127.0.0.1:10249")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	manifest := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(manifest, []byte(twoServices), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- Run(ctx, config(t, "--services-file="+manifest, "--iptables-min-sync-period=0")) }()

	client := &http.Client{Timeout: time.Second}
	status := func(url string) int {
		resp, err := client.Get(url)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	lab.Eventually(t, "healthz to report a sync with the metrics port taken", func() (bool, string) {
		select {
		case err := <-done:
			t.Fatalf("Run stopped with the metrics port taken: %v", err)
		default:
		}
		code := status(healthzURL + "/healthz")
		return code == http.StatusOK, http.StatusText(code)
	})
	ln.Close()
	lab.Eventually(t, "the metrics port to be bound once free", func() (bool, string) {
		code := status(metricsURL + "/metrics")
		return code == http.StatusOK, http.StatusText(code)
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run after cancel: %v", err)
	}
}
