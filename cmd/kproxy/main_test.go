package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	kubeproxyconfig "k8s.io/kube-proxy/config/v1alpha1"

	"kproxy.dev/kproxy/cmd/kproxy/app"
	"kproxy.dev/kproxy/cmd/kproxy/options"
	"kproxy.dev/kproxy/sync/mode"
)

// recorder stands in for app.Run and app.Cleanup so the command can be run
// in-process without starting kproxy.
type recorder struct {
	ran, cleaned *options.Config
	runErr       error
}

func (r *recorder) deps() deps {
	return deps{
		run:      func(_ context.Context, cfg *options.Config, _ app.Debug) error { r.ran = cfg; return r.runErr },
		cleanup:  func(_ context.Context, cfg *options.Config) error { r.cleaned = cfg; return nil },
		hostname: func() (string, error) { return "Test-Node", nil },
	}
}

func execute(t *testing.T, r *recorder, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(context.Background(), args, &out, &errOut, r.deps())
	return code, out.String(), errOut.String()
}

func TestHelpListsEveryFlag(t *testing.T) {
	code, out, _ := execute(t, &recorder{}, "--help")
	if code != 0 {
		t.Fatalf("--help exit code %d", code)
	}
	for _, flag := range []string{
		"proxy-mode", "kubeconfig", "master", "config", "write-config-to", "cleanup", "hostname-override",
		"bind-address", "healthz-bind-address", "metrics-bind-address", "cluster-cidr", "masquerade-all",
		"iptables-sync-period", "iptables-min-sync-period", "iptables-masquerade-bit", "ipvs-scheduler",
		"ipvs-sync-period", "ipvs-min-sync-period", "ipvs-exclude-cidrs", "ipvs-strict-arp", "proxy-port-range",
		"udp-timeout", "nodeport-addresses", "conntrack-max-per-core", "conntrack-min",
		"conntrack-tcp-timeout-established", "conntrack-tcp-timeout-close-wait", "conntrack-tcp-be-liberal",
		"conntrack-udp-timeout", "conntrack-udp-timeout-stream", "config-sync-period", "kube-api-qps",
		"kube-api-burst", "kube-api-content-type", "oom-score-adj", "profiling", "detect-local-mode",
		"feature-gates", "services-file", "vmodule", "version", "logging-format", "log-flush-frequency",
	} {
		if !strings.Contains(out, "--"+flag+" ") {
			t.Errorf("--help does not list --%s", flag)
		}
	}
	for _, want := range []string{"-v, --v Level", "userspace", "iptables", "ipvs", "(default 30s)", `(default "0.0.0.0:10256")`} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q", want)
		}
	}
}

func TestBadFlagsExitNonZeroNamingTheFlag(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--proxy-mode=foo"}, `Error: invalid value "foo" for --proxy-mode: must be one of userspace, iptables, ipvs, nftables`},
		{[]string{"--iptables-masquerade-bit=32"}, `invalid value "32" for --iptables-masquerade-bit`},
		{[]string{"--iptables-min-sync-period=1h"}, `for --iptables-min-sync-period: must not be greater than --iptables-sync-period`},
		{[]string{"--cluster-cidr=bogus"}, `invalid value "bogus" for --cluster-cidr`},
		{[]string{"--proxy-port-range=9-1"}, `for --proxy-port-range`},
		{[]string{"--udp-timeout=0s"}, `for --udp-timeout`},
		{[]string{"--ipvs-scheduler=random"}, `for --ipvs-scheduler`},
		{[]string{"--services-file=/does/not/exist"}, `for --services-file`},
		{[]string{"--services-file=.", "--master=https://198.19.0.1"}, `--services-file and --master are mutually exclusive`},
		{[]string{"--no-such-flag"}, `unknown flag: --no-such-flag`},
		{[]string{"--conntrack-min=many"}, `--conntrack-min`},
		{[]string{"extra-arg"}, `takes no arguments`},
		{[]string{"--config=/does/not/exist.yaml"}, `/does/not/exist.yaml`},
	}
	for _, tc := range tests {
		r := &recorder{}
		code, _, stderr := execute(t, r, tc.args...)
		if code == 0 {
			t.Errorf("%q: exit code 0, want non-zero", tc.args)
		}
		if !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: stderr %q does not contain %q", tc.args, stderr, tc.want)
		}
		if r.ran != nil || r.cleaned != nil {
			t.Errorf("%q: kproxy was started despite the error", tc.args)
		}
	}
}

func TestRunReceivesResolvedConfig(t *testing.T) {
	r := &recorder{}
	code, _, stderr := execute(t, r, "--proxy-mode=iptables", "--masquerade-all", "-v=0", "--v=0")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if r.ran == nil || r.cleaned != nil {
		t.Fatalf("run called: %v, cleanup called: %v", r.ran != nil, r.cleaned != nil)
	}
	if r.ran.Mode != mode.IPTables || !r.ran.MasqueradeAll || r.ran.NodeName != "test-node" {
		t.Errorf("config mode %q masqueradeAll %v node %q", r.ran.Mode, r.ran.MasqueradeAll, r.ran.NodeName)
	}
}

func TestRunErrorExitsNonZero(t *testing.T) {
	r := &recorder{runErr: errors.New("iptables unusable")}
	code, _, stderr := execute(t, r)
	if code == 0 || !strings.Contains(stderr, "Error: iptables unusable") {
		t.Errorf("exit %d stderr %q, want non-zero and the error", code, stderr)
	}
}

func TestCleanupDoesNotRun(t *testing.T) {
	r := &recorder{}
	if code, _, stderr := execute(t, r, "--cleanup"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if r.cleaned == nil || !r.cleaned.Cleanup || r.ran != nil {
		t.Errorf("cleanup called: %v, run called: %v", r.cleaned != nil, r.ran != nil)
	}
}

func TestWriteConfigToWritesAndExits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "out.yaml")
	r := &recorder{}
	if code, _, stderr := execute(t, r, "--write-config-to", path, "--proxy-mode=ipvs", "--ipvs-scheduler=sh"); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if r.ran != nil || r.cleaned != nil {
		t.Error("--write-config-to must not start or clean up kproxy")
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"apiVersion: kubeproxy.config.k8s.io/v1alpha1", "kind: KubeProxyConfiguration", "mode: ipvs", "scheduler: sh"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("written config lacks %q:\n%s", want, data)
		}
	}
	// The written file is a valid --config that resolves to the same mode.
	r2 := &recorder{}
	if code, _, stderr := execute(t, r2, "--config", path); code != 0 {
		t.Fatalf("reading back: exit %d: %s", code, stderr)
	}
	if r2.ran.Mode != mode.IPVS || r2.ran.IPVSScheduler != "sh" {
		t.Errorf("read back mode %q scheduler %q", r2.ran.Mode, r2.ran.IPVSScheduler)
	}
}

func TestCancelledContextReachesRun(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var sawCancel bool
	d := deps{
		run: func(ctx context.Context, _ *options.Config, _ app.Debug) error {
			<-ctx.Done() // a real run loop returns once the signal cancels ctx
			sawCancel = true
			return nil
		},
		hostname: func() (string, error) { return "n", nil },
	}
	var out, errOut bytes.Buffer
	if code := run(ctx, nil, &out, &errOut, d); code != 0 || !sawCancel {
		t.Errorf("exit %d, run saw cancellation: %v, stderr %q", code, sawCancel, errOut.String())
	}
}

func TestCheckBadConfig(t *testing.T) {
	tests := []struct {
		mode      string
		addresses []string
		want      bool
	}{
		{mode: "", want: true},
		{mode: "iptables", want: true},
		{mode: "ipvs", want: true},
		{mode: "userspace", want: true},
		{mode: "nftables"}, // defaults to primary
		{mode: "iptables", addresses: []string{"primary"}},
		{mode: "ipvs", addresses: []string{"10.0.0.0/8"}},
	}
	for _, tt := range tests {
		fc := options.NewDefaultFileConfiguration()
		fc.Mode = kubeproxyconfig.ProxyMode(tt.mode)
		fc.NodePortAddresses = tt.addresses
		if err := checkBadConfig(fc); (err != nil) != tt.want {
			t.Errorf("mode %q, nodePortAddresses %q: checkBadConfig = %v, want an error: %t", tt.mode, tt.addresses, err, tt.want)
		}
	}
}
