package syncscale

import (
	"fmt"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"
)

// MachineHeader is the table's first lines: what ran, when, and where.
func MachineHeader(kubeProxyBin string, s Settings, took time.Duration) []string {
	return []string{
		"**kproxy vs kube-proxy, sync cost per proxy mode** (`go test -run '^$' -bench SyncScale -benchtime 1x -timeout 0 ./bench/syncscale/`)",
		"Date: " + time.Now().UTC().Format("2006-01-02 15:04 MST") + fmt.Sprintf(", the run took %.0f min", took.Minutes()),
		"Machine: " + benchtable.Machine(),
		fmt.Sprintf("kube-proxy %s; %s; %s; %s", benchtable.FirstLineOf(kubeProxyBin, "--version"), benchtable.FirstLineOf("iptables-nft", "--version"),
			benchtable.FirstLineOf("iptables-legacy", "--version"), benchtable.FirstLineOf("nft", "--version")),
		"Settings: " + s.String(),
	}
}
