package guest_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
)

// onlyIPVSModules are the modules only the IPVS mode needs (kube-proxy loads
// them in that mode alone), with the ones that use them, in removal order.
// sctp is not among them: once loaded it cannot be removed (its kernel
// sockets hold it), so what shows that kproxy does not load it is that it
// opens no SCTP socket.
var onlyIPVSModules = []string{
	"ip_vs_sh", "ip_vs_wrr", "ip_vs_rr", "ip_vs",
	"xt_set", "ip_set_hash_ip", "ip_set_hash_ipport", "ip_set_hash_ipportip", "ip_set_hash_ipportnet",
	"ip_set_hash_net", "ip_set_bitmap_port", "ip_set",
	"dummy",
}

// tcpOnlyServices is a services file of one TCP service: nothing in it
// needs SCTP.
const tcpOnlyServices = `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 198.18.0.10
  ports: [{name: http, port: 80, protocol: TCP, targetPort: 8080}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: default
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports: [{name: http, port: 8080, protocol: TCP}]
endpoints: [{addresses: [198.19.1.10], conditions: {ready: true}}]
`

// TestGuestKproxyLoadsOnlyTheModulesItsModeNeeds: on a kernel that has
// ip_vs, ip_set and dummy as modules, not loaded, kproxy started in the
// iptables and userspace modes syncs a TCP service and loads none of them,
// as kube-proxy loads them in its IPVS mode only; the IPVS mode loads its
// own. No mode opens an SCTP socket for a node without SCTP services,
// which would load sctp (kube-proxy never does; an upstream spec checks).
func TestGuestKproxyLoadsOnlyTheModulesItsModeNeeds(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	guest.SkipWithoutNetfilter(t)
	bin := lab.KproxyBinary(t)
	var removed []string
	// Later tests of this guest expect the default modules.
	t.Cleanup(func() {
		for _, m := range removed {
			if out, err := exec.Command("modprobe", m).CombinedOutput(); err != nil {
				t.Errorf("modprobe %s again: %v\n%s", m, err, out)
			}
		}
	})
	for _, m := range onlyIPVSModules {
		if !loaded(m) {
			continue
		}
		if out, err := exec.Command("rmmod", m).CombinedOutput(); err != nil {
			t.Fatalf("rmmod %s: %v\n%s", m, err, out)
		}
		removed = append(removed, m)
	}
	manifest := filepath.Join(t.TempDir(), "services.yaml")
	if err := os.WriteFile(manifest, []byte(tcpOnlyServices), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode       string
		wantLoaded []string
	}{
		{mode: "iptables"},
		{mode: "userspace"},
		{mode: "ipvs", wantLoaded: []string{"ip_vs", "ip_set", "dummy"}},
	} {
		t.Run(tc.mode, func(t *testing.T) {
			// Modules are the kernel's, shared by every namespace; the
			// node is a fresh namespace of its own.
			if lab.InFreshNetns(t, lab.KproxyBinaryEnv+"="+bin) {
				return
			}
			trace := filepath.Join(t.TempDir(), "socket.trace")
			syncOnce(t, "strace", "--seccomp-bpf", "-f", "-e", "trace=socket", "-o", trace,
				bin, "--proxy-mode="+tc.mode, "--services-file="+manifest, "--hostname-override=node-1",
				"--conntrack-max-per-core=0")
			for _, m := range []string{"ip_vs", "ip_set", "dummy"} {
				if want := slices.Contains(tc.wantLoaded, m); loaded(m) != want {
					t.Errorf("after a sync in the %s mode, module %s loaded: %t, want %t", tc.mode, m, !want, want)
				}
			}
			calls, err := os.ReadFile(trace)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(calls), "socket(") {
				t.Fatalf("strace recorded no socket call:\n%s", calls)
			}
			for line := range strings.Lines(string(calls)) {
				if strings.Contains(line, "IPPROTO_SCTP") {
					t.Errorf("the %s mode opened an SCTP socket, which loads sctp: %s", tc.mode, strings.TrimSpace(line))
				}
			}
		})
	}
}

// loaded says whether /proc/modules lists module m.
func loaded(m string) bool {
	data, err := os.ReadFile("/proc/modules")
	if err != nil {
		return false
	}
	for line := range strings.Lines(string(data)) {
		if name, _, _ := strings.Cut(line, " "); name == m {
			return true
		}
	}
	return false
}

// syncOnce runs kproxy (through name and args: strace) until its first
// sync, read from its metrics, and stops it.
func syncOnce(t *testing.T, name string, args ...string) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	// A group of its own: killing strace alone would leave kproxy running.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s %s printed:\n%s", name, strings.Join(args, " "), out.String())
		}
	})
	// The guest's system calls are slow: kproxy's start takes seconds,
	// more under strace, and more than two minutes in a guest beside the
	// other suites of a busy CI run. A bound, not a measure.
	lab.Within(t, 6*time.Minute, "kproxy's first sync", func() (bool, string) {
		v, ok := lab.Metric(lab.SyncCountMetric)
		var got int
		_, err := fmt.Sscan(v, &got)
		return ok && err == nil && got >= 1, v
	})
}
