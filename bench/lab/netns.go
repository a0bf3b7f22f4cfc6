// Package lab builds the network-namespace test hosts kproxy's end-to-end
// tests and benchmarks run in. Nothing here touches the host's own network:
// every test gets namespaces it created and removes.
package lab

import (
	"flag"
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

// InFreshNetns runs the calling test or benchmark inside a new network
// namespace with only loopback up. Go cannot move a running multi-threaded
// process between namespaces, so the test binary re-executes itself for this
// one test under `unshare --net`; the outer call waits and reports the inner
// result. Use as
//
//	if lab.InFreshNetns(t) { return }
//
// The inner process sees InFreshNetns return false, with loopback up, and runs
// the body. Extra environment (KEY=value) is passed to the inner process.
//
// For a benchmark the inner run's output goes straight to stdout, so its
// result lines read like any other benchmark's (benchstat parses them), and
// the outer benchmark skips itself instead of reporting an empty loop.
func InFreshNetns(tb testing.TB, env ...string) (ranOutside bool) {
	tb.Helper()
	if os.Getenv(innerEnv) == tb.Name() {
		bringLoopbackUp(tb)
		return false
	}
	RequireRoot(tb)
	if _, err := exec.LookPath("unshare"); err != nil {
		tb.Fatalf("unshare (util-linux) is needed to run %s in its own network namespace: %v", tb.Name(), err)
	}
	pattern := "^" + regexpQuoteSubtests(tb.Name()) + "$"
	_, isBenchmark := tb.(*testing.B)
	args := []string{"--net", "--", os.Args[0], "-test.run", pattern, "-test.count", "1"}
	if isBenchmark {
		args = []string{"--net", "--", os.Args[0], "-test.run", "^$", "-test.bench", pattern,
			"-test.benchtime", flagValue("test.benchtime", "1s"), "-test.count", flagValue("test.count", "1"),
			"-test.benchmem"}
	}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.Command("unshare", args...)
	cmd.Env = append(append(os.Environ(), innerEnv+"="+tb.Name()), env...)
	if isBenchmark {
		cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
		if err := cmd.Run(); err != nil {
			tb.Fatalf("%s inside a fresh network namespace failed: %v", tb.Name(), err)
		}
		tb.SkipNow()
		return true
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("%s inside a fresh network namespace failed: %v\n%s", tb.Name(), err, indent(out))
	}
	if testing.Verbose() {
		tb.Logf("inner run of %s:\n%s", tb.Name(), indent(out))
	}
	if strings.Contains(string(out), "--- SKIP: "+tb.Name()) {
		tb.Skipf("%s skipped inside its namespace:\n%s", tb.Name(), indent(out))
	}
	return true
}

// flagValue reads a testing flag of the current process, e.g. test.benchtime.
func flagValue(name, fallback string) string {
	if f := flag.Lookup(name); f != nil {
		return f.Value.String()
	}
	return fallback
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
