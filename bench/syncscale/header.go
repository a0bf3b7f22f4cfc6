package syncscale

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"
)

// MachineHeader is the table's first lines: what ran, when, and where.
func MachineHeader(kubeProxyBin string, s Settings, took time.Duration) []string {
	kernelRelease := firstLineOf("uname", "-r")
	cpu := "unknown CPU"
	if info, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(info)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				cpu = strings.TrimSpace(v)
				break
			}
		}
	}
	return []string{
		"**kproxy vs kube-proxy, sync cost per proxy mode** (`go test -run '^$' -bench SyncScale -benchtime 1x -timeout 0 ./bench/syncscale/`)",
		"Date: " + time.Now().UTC().Format("2006-01-02 15:04 MST") + fmt.Sprintf(", the run took %.0f min", took.Minutes()),
		fmt.Sprintf("Machine: %s, %d CPUs, Linux %s, %s", cpu, runtime.NumCPU(), kernelRelease, runtime.Version()),
		fmt.Sprintf("kube-proxy %s; %s; %s; %s", firstLineOf(kubeProxyBin, "--version"), firstLineOf("iptables-nft", "--version"), firstLineOf("iptables-legacy", "--version"), firstLineOf("nft", "--version")),
		"Settings: " + s.String(),
	}
}

// firstLineOf runs a command and returns the first line of its output, or
// what went wrong.
func firstLineOf(name string, args ...string) string {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(%s: %v)", name, err)
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// LoadAverage is /proc/loadavg's first three fields: the machine's load
// (shared with other work) next to every measurement.
func LoadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
