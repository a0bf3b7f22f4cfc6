// Package scanmod exercises the program scan: each function runs programs
// in one of the ways kproxy's code does.
package scanmod

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

func constant() { _ = exec.Command("iptables-save").Run() }

const tool = "ipset"

func namedConstant() { _, _ = exec.LookPath(tool) }

// run is a wrapper: its callers name the program.
func run(ctx context.Context, name string, args ...string) error {
	return exec.CommandContext(ctx, name, args...).Run()
}

func throughWrapper() { _ = run(context.Background(), "conntrack", "-L") }

// Runner is satisfied by execRunner, whose Run passes name on.
type Runner interface {
	Run(name string, args ...string) error
}

type execRunner struct{}

func (execRunner) Run(name string, args ...string) error { return exec.Command(name, args...).Run() }

func throughInterface(r Runner) { _ = r.Run("nft", "list", "tables") }

func rangeOverList() {
	for _, t := range []string{"wrk", "iperf3"} {
		_, _ = exec.LookPath(t)
	}
}

type Backend string

// Command is computed from the receiver: the scan is told Backend's values.
func (b Backend) Command(ipv6 bool) string {
	if ipv6 {
		return "ip6tables-" + string(b)
	}
	return "iptables-" + string(b)
}

func computed(b Backend) { _ = exec.Command(b.Command(false) + "-restore").Run() }

type server struct{ binary string }

func field() {
	s := server{binary: "/usr/sbin/nginx"}
	_ = exec.Command(s.binary).Run()
}

func launchers() {
	_ = exec.Command("ip", "netns", "exec", "ns1", "haproxy", "-f", "x").Run()
	_ = exec.Command("sh", "-c", "echo hi; sleep 1 & wait").Run()
}

func joined(dir string) { _ = exec.Command(filepath.Join(dir, "kube-apiserver")).Run() }

func replaced(legacy bool) {
	name := "iptables"
	if legacy {
		name = strings.Replace(name, "tables", "tables-legacy", 1)
	}
	_ = exec.Command(name).Run()
}

func fromEnvironment() { _ = exec.Command(os.Getenv("PROXY")).Run() }

// saveOf builds the name from its parameter: not a wrapper, so the site is
// here, and unresolved.
func saveOf(tool string) { _ = exec.Command(tool + "-save").Run() }

func callsSaveOf() { saveOf("iptables") }
