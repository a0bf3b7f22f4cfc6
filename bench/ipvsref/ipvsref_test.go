package ipvsref

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
)

// dumpDirEnv tells the two inner runs of a case (each in a namespace of its
// own, see lab.InFreshNetns) where to leave their dumps; it also marks a
// process as such an inner run.
const dumpDirEnv = "KPROXY_IPVSREF_DUMP_DIR"

// stateCase is one services file, given to both proxies with the same flags
// (ipvsref takes kube-proxy's flag names).
type stateCase struct {
	name  string
	file  string // in testdata/
	flags []string
}

func stateCases() []stateCase {
	return []stateCase{
		// ClusterIP TCP, UDP and SCTP, ClientIP affinity, internal
		// policy Local, no endpoints, headless, an IPv6 service; with
		// the source-hashing scheduler.
		{name: "clusterip", file: "clusterip.yaml", flags: []string{"--ipvs-scheduler=sh"}},
		// NodePorts of each protocol, externalIPs, external policy Local
		// with a local endpoint; pod traffic told apart by --cluster-cidr.
		{name: "external", file: "external.yaml", flags: []string{"--cluster-cidr=198.19.1.0/24,fd00:19:1::/64"}},
		// LoadBalancers with source ranges (one admitting the node, one
		// not), external policy Local with a health-check node port,
		// affinity; with --masquerade-all.
		{name: "loadbalancer", file: "loadbalancer.yaml", flags: []string{"--masquerade-all"}},
	}
}

// TestGuestSameIPVSStateAsKubeProxy runs kube-proxy v1.36's IPVS proxier and
// kproxy's IPVS mode on the same objects, each in a fresh network
// namespace, and compares what they leave in the kernel. Differences
// kproxy makes on purpose would be listed in knownExceptions; any other is
// a finding.
func TestGuestSameIPVSStateAsKubeProxy(t *testing.T) {
	guest.SkipUnlessInGuest(t)
	ipvsref := toolsBinary(t, "ipvsref")
	kproxy := os.Getenv(lab.KproxyBinaryEnv)
	if kproxy == "" {
		// Building kproxy inside the guest would take minutes.
		t.Skipf("%s is not set: build kproxy on the host (go build -o bin/kproxy ./cmd/kproxy) and pass its path", lab.KproxyBinaryEnv)
	}
	for _, c := range stateCases() {
		t.Run(c.name, func(t *testing.T) {
			file, err := filepath.Abs(filepath.Join("testdata", c.file))
			if err != nil {
				t.Fatal(err)
			}
			dir := os.Getenv(dumpDirEnv)
			inner := dir != ""
			if !inner {
				dir = t.TempDir()
			}
			kubeProxyDump, kproxyDump := filepath.Join(dir, "kube-proxy.json"), filepath.Join(dir, "kproxy.json")
			t.Run("kube-proxy", func(t *testing.T) {
				if lab.InFreshNetns(t, dumpDirEnv+"="+dir) {
					return
				}
				setUpNode(t)
				runKubeProxy(t, ipvsref, file, c.flags)
				captureTo(t, kubeProxyDump)
			})
			t.Run("kproxy", func(t *testing.T) {
				if lab.InFreshNetns(t, dumpDirEnv+"="+dir) {
					return
				}
				setUpNode(t)
				runKproxy(t, kproxy, file, c.flags)
				captureTo(t, kproxyDump)
			})
			if inner || t.Failed() {
				return
			}
			want := withoutExceptions(readCapture(t, kubeProxyDump), sideKubeProxy, knownExceptions())
			got := withoutExceptions(readCapture(t, kproxyDump), sideKproxy, knownExceptions())
			if testing.Verbose() {
				t.Logf("kube-proxy's state:\n%s", render(want))
			}
			for _, d := range Compare(want, got) {
				t.Errorf("%s differs (- kube-proxy, + kproxy):\n%s", d.Section, d.Diff)
			}
		})
	}
}

// render shows sections as text, for the verbose log.
func render(sections []Section) string {
	var b strings.Builder
	for _, s := range sections {
		fmt.Fprintf(&b, "== %s (%d lines)\n", s.Name, len(s.Lines))
		for _, line := range s.Lines {
			fmt.Fprintf(&b, "%s\n", line)
		}
	}
	return b.String()
}

// toolsBinary returns a reference binary built by `make tools` into
// bench/tools/bin (or $KPROXY_TOOLS_BIN), skipping the test if it is missing.
func toolsBinary(t *testing.T, name string) string {
	t.Helper()
	dir := os.Getenv(lab.ToolsBinEnv)
	if dir == "" {
		dir = filepath.Join("..", "tools", "bin") // from this package's directory
	}
	bin, err := filepath.Abs(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("%s not built: run `make tools` (or: cd bench/tools && go build -o bin/%s ./%s): %v", name, name, name, err)
	}
	return bin
}
