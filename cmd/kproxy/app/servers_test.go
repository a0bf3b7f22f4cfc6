package app

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/serve/healthz"
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

// TestBindErrorKubeProxyEvent: a port in use with --bind-address-hard-fail
// keeps kproxy's error and gives kube-proxy's event reason and note.
func TestBindErrorKubeProxyEvent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	addr := ln.Addr().String()
	m := metrics.New()
	health := healthz.New(time.Minute, m, nil)
	tests := []struct {
		what, flag string
		open       func() (*healthz.Server, error)
		wantErr    string
		reason     string
		note       string
	}{
		{
			what: "healthz", flag: "--healthz-bind-address",
			open:    func() (*healthz.Server, error) { return healthz.NewHealthServer(addr, health) },
			wantErr: "--healthz-bind-address: healthz server: listening on " + addr + ": listen tcp " + addr + ": bind: address already in use",
			reason:  "FailedToStartProxierHealthcheck",
			note:    "healthz server failed: failed to start proxy healthz on " + addr + ": listen tcp " + addr + ": bind: address already in use",
		},
		{
			what: "metrics", flag: "--metrics-bind-address",
			open: func() (*healthz.Server, error) {
				return healthz.NewMetricsServer(healthz.MetricsServerConfig{Address: addr, Metrics: m})
			},
			wantErr: "--metrics-bind-address: metrics server: listening on " + addr + ": listen tcp " + addr + ": bind: address already in use",
			reason:  "FailedToStartMetricServer",
			note:    "listen tcp " + addr + ": bind: address already in use",
		},
	}
	for _, tt := range tests {
		set := &serverSet{logger: klog.Background(), hardFail: true}
		err := set.add(tt.what, tt.flag, addr, tt.open)
		var be *bindError
		if !errors.As(err, &be) {
			t.Fatalf("%s: error %v is not a bindError", tt.what, err)
		}
		if err.Error() != tt.wantErr {
			t.Errorf("%s: error %q, want %q", tt.what, err, tt.wantErr)
		}
		if reason, note := be.kubeProxyEvent(); reason != tt.reason || note != tt.note {
			t.Errorf("%s: event %s %q, want %s %q", tt.what, reason, note, tt.reason, tt.note)
		}
	}
}
