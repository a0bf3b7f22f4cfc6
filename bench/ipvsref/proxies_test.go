package ipvsref

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// The node both proxies run as, in namespaces of their own: the same name,
// the same addresses on the same kind of link (a veth pair, as
// lab.AddNodeLink makes it).
const (
	nodeName = "node"
	nodeIPv4 = "198.19.0.1/24"
	nodeIPv6 = "fd00:19::1/64"
)

// savesInGuest are the iptables-save commands of the guest kernel, which
// has the legacy backend only.
func savesInGuest() []SaveCommand {
	return []SaveCommand{{"IPv4", "iptables-legacy-save"}, {"IPv6", "ip6tables-legacy-save"}}
}

// setUpNode gives this namespace the node's link and addresses.
func setUpNode(t *testing.T) {
	t.Helper()
	lab.AddNodeLink(t, nodeIPv4, nodeIPv6)
}

// runKubeProxy runs kube-proxy's IPVS proxier (the ipvsref command) for one
// sync of servicesFile in this namespace. iptables, ip6tables and their
// -save/-restore resolve to the legacy backend through PATH, as the
// kube-proxy image's iptables wrapper would pick it on this kernel (kube-proxy
// runs plain "iptables", which Debian points at the nf_tables backend).
func runKubeProxy(t *testing.T, ipvsref, servicesFile string, flags []string) {
	t.Helper()
	args := append([]string{"-services-file", servicesFile, "-hostname-override", nodeName}, flags...)
	cmd := exec.Command(ipvsref, args...)
	cmd.Env = append(os.Environ(), "PATH="+legacyIPTablesDir(t)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kube-proxy's IPVS proxier (%s %s): %v\n%s", ipvsref, strings.Join(args, " "), err, out)
	}
	if testing.Verbose() {
		t.Logf("kube-proxy's IPVS proxier:\n%s", out)
	}
}

// legacyIPTablesDir makes a directory whose iptables commands are the
// legacy multi-call binary under the plain names.
func legacyIPTablesDir(t *testing.T) string {
	t.Helper()
	legacy, err := exec.LookPath("iptables-legacy")
	if err != nil {
		t.Fatalf("iptables-legacy: %v", err)
	}
	multi, err := filepath.EvalSymlinks(legacy)
	if err != nil {
		t.Fatalf("resolving %s: %v", legacy, err)
	}
	dir := t.TempDir()
	for _, family := range []string{"iptables", "ip6tables"} {
		for _, suffix := range []string{"", "-save", "-restore"} {
			if err := os.Symlink(multi, filepath.Join(dir, family+suffix)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}

// runKproxy runs kproxy in the IPVS mode on servicesFile in this namespace
// until its first sync has finished, then kills it, so what that sync
// programmed stays as it left it.
func runKproxy(t *testing.T, kproxy, servicesFile string, flags []string) {
	t.Helper()
	args := append([]string{"--proxy-mode=ipvs", "--services-file=" + servicesFile, "--hostname-override=" + nodeName,
		"--conntrack-max-per-core=0", "-v=2"}, flags...)
	logPath := filepath.Join(t.TempDir(), "kproxy.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logFile.Close()
	cmd := exec.Command(kproxy, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting kproxy: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	log := func() string { data, _ := os.ReadFile(logPath); return string(data) }

	// A bound on setup, not something measured: in the guest kernel
	// kproxy's start (binary, kernel probe) and first sync took over a
	// minute on a busy host; bench/e2e allows three.
	lab.Within(t, 3*time.Minute, "kproxy's first sync", func() (bool, string) {
		select {
		case err := <-exited:
			t.Fatalf("kproxy (%s) exited before its first sync: %v\n%s", strings.Join(args, " "), err, log())
		default:
		}
		v, ok := lab.Metric(lab.SyncCountMetric)
		var n int
		_, scanErr := fmt.Sscan(v, &n)
		return ok && scanErr == nil && n >= 1, "syncs: " + v
	})
	// SIGKILL: no shutdown path may touch the state.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("killing kproxy: %v", err)
	}
	<-exited
	if testing.Verbose() {
		t.Logf("kproxy:\n%s", log())
	}
}

// captureTo dumps this namespace's state into path (JSON).
func captureTo(t *testing.T, path string) {
	t.Helper()
	sections, err := Capture(savesInGuest())
	if err != nil {
		t.Fatalf("dumping the state: %v", err)
	}
	data, err := json.MarshalIndent(sections, "", " ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatalf("writing the dump: %v", err)
	}
}

// readCapture reads a dump captureTo wrote.
func readCapture(t *testing.T, path string) []Section {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading a dump: %v", err)
	}
	var sections []Section
	if err := json.Unmarshal(data, &sections); err != nil {
		t.Fatalf("decoding %s: %v", path, err)
	}
	return sections
}
