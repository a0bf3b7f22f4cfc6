// Package lab builds the network-namespace test hosts kproxy's end-to-end
// tests and benchmarks run in. Nothing here touches the host's own network:
// every test gets namespaces it created and removes.
package lab

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// innerEnv marks a test process that was re-executed inside its namespace; its
// value is the test name the namespace was made for.
const innerEnv = "KPROXY_LAB_INNER_TEST"

// RequireRoot skips the test when not running as root: namespaces, iptables
// and conntrack need CAP_NET_ADMIN. `sudo make test` runs as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces); run `sudo make test`")
	}
}

// InFreshNetns runs the calling test inside a new network namespace with only
// loopback up. Go cannot move a running multi-threaded process between
// namespaces, so the test binary re-executes itself for this one test under
// `unshare --net`; the outer call waits and reports the inner result. Use as
//
//	if lab.InFreshNetns(t) { return }
//
// The inner process sees InFreshNetns return false, with loopback up, and runs
// the body. Extra
// environment (KEY=value) is passed to the inner process.
func InFreshNetns(t *testing.T, env ...string) (ranOutside bool) {
	t.Helper()
	if os.Getenv(innerEnv) == t.Name() {
		bringLoopbackUp(t)
		return false
	}
	RequireRoot(t)
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Fatalf("unshare (util-linux) is needed to run %s in its own network namespace: %v", t.Name(), err)
	}
	args := []string{"--net", "--", os.Args[0],
		"-test.run", "^" + regexpQuoteSubtests(t.Name()) + "$", "-test.count", "1"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(append(os.Environ(), innerEnv+"="+t.Name()), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s inside a fresh network namespace failed: %v\n%s", t.Name(), err, indent(out))
	}
	if testing.Verbose() {
		t.Logf("inner run of %s:\n%s", t.Name(), indent(out))
	}
	if strings.Contains(string(out), "--- SKIP: "+t.Name()) {
		t.Skipf("%s skipped inside its namespace:\n%s", t.Name(), indent(out))
	}
	return true
}

// bringLoopbackUp makes 127.0.0.1 usable in a new namespace, where lo starts down.
func bringLoopbackUp(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("bringing loopback up: %v: %s", err, out)
	}
}

// regexpQuoteSubtests quotes each path element of a test name for -test.run,
// which splits its pattern on unbracketed slashes.
func regexpQuoteSubtests(name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = quoteMeta(p)
	}
	return strings.Join(parts, "$/^")
}

func quoteMeta(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`\.+*?()|[]{}^$`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

func indent(out []byte) string {
	s := strings.TrimRight(string(out), "\n")
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// Run runs a command and fails the test with its output if it fails.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
