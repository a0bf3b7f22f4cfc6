package main

import (
	"bytes"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// These tests run the real kproxy binary, as an operator would, in fresh
// network namespaces.

// inNetnsWithBinary runs the test in a fresh namespace with the kproxy
// binary built beforehand; it returns "" in the outer process.
func inNetnsWithBinary(t *testing.T) string {
	t.Helper()
	bin := lab.KproxyBinary(t)
	if lab.InFreshNetns(t, lab.KproxyBinaryEnv+"="+bin) {
		return ""
	}
	return bin
}

func sampleManifest(t *testing.T) string {
	t.Helper()
	path, err := filepath.Abs("../../deploy/samples/services.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("the sample manifest is missing: %v", err)
	}
	return path
}

func exitCode(err error) int {
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return exit.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func TestBinaryStartsServesAndStopsOnSIGTERM(t *testing.T) {
	bin := inNetnsWithBinary(t)
	if bin == "" {
		return
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "--services-file", sampleManifest(t), "--hostname-override", "kproxy-demo",
		"--proxy-mode", "iptables")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
	}()

	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://127.0.0.1:10249/metrics")
		if err == nil {
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if strings.Contains(body.String(), "\nkubeproxy_sync_proxy_rules_duration_seconds_count{ip_family=\"IPv4\"} 1\n") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("kproxy did not finish a first sync within 15s; output:\n%s", out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	resp, err := http.Get("http://127.0.0.1:10249/proxyMode")
	if err != nil {
		t.Fatal(err)
	}
	var mode bytes.Buffer
	_, _ = mode.ReadFrom(resp.Body)
	resp.Body.Close()
	if strings.TrimSpace(mode.String()) != "iptables" {
		t.Errorf("/proxyMode = %q, want iptables", mode.String())
	}
	rules, err := exec.Command("iptables-save", "-t", "nat").CombinedOutput()
	if err != nil || !strings.Contains(string(rules), `--comment "shop/web:http cluster IP"`) {
		t.Errorf("the sample's shop/web service is not in the nat table (%v):\n%s", err, rules)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if code := exitCode(err); code != 0 {
			t.Fatalf("kproxy exited with %d after SIGTERM, want 0; output:\n%s", code, out.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("kproxy did not exit within 10s of SIGTERM; output:\n%s", out.String())
	}
	log := out.String()
	for _, want := range []string{
		`"Using proxy mode"`,
		`"kproxy started"`,
		`"kproxy stopped"`,
	} {
		if !strings.Contains(log, want) {
			t.Errorf("kproxy's log lacks %s; log:\n%s", want, log)
		}
	}
}

func TestBinaryExitCodes(t *testing.T) {
	bin := inNetnsWithBinary(t)
	if bin == "" {
		return
	}
	manifest := sampleManifest(t)
	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		wantOut  []string
	}{
		{
			name:     "cleanup on a clean namespace",
			args:     []string{"--cleanup"},
			wantCode: 0,
		},
		{
			name:     "cleanup again is idempotent",
			args:     []string{"--cleanup"},
			wantCode: 0,
		},
		{
			name:     "ipvs without IPVS in the kernel",
			args:     []string{"--services-file", manifest, "--proxy-mode", "ipvs"},
			wantCode: 1,
			wantOut:  []string{"IPVS is absent", "--proxy-mode=iptables", "--proxy-mode=userspace"},
		},
		{
			name:     "invalid flag value",
			args:     []string{"--services-file", manifest, "--iptables-masquerade-bit", "40"},
			wantCode: 1,
			wantOut:  []string{"--iptables-masquerade-bit"},
		},
		{
			name:     "missing services file",
			args:     []string{"--services-file", "/nonexistent/services.yaml"},
			wantCode: 1,
			wantOut:  []string{"--services-file", "/nonexistent/services.yaml"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(bin, tc.args...)
			out, err := cmd.CombinedOutput()
			if code := exitCode(err); code != tc.wantCode {
				t.Fatalf("kproxy %v exited %d, want %d; output:\n%s", tc.args, code, tc.wantCode, out)
			}
			for _, want := range tc.wantOut {
				if !strings.Contains(string(out), want) {
					t.Errorf("kproxy %v output lacks %q:\n%s", tc.args, want, out)
				}
			}
		})
	}
}
