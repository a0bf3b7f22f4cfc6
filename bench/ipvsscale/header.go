package ipvsscale

import (
	"fmt"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"
)

// Command is how the table is made (see the package documentation).
const Command = "TMPDIR=/var/tmp go test -run '^$' -bench '^BenchmarkIPVSScale$' -benchtime 1x -timeout 30m ./bench/ipvsscale/"

// tableHeader is the table's first lines: what ran, when, and where.
func tableHeader(s Settings, guestKernel string, took time.Duration) []string {
	if guestKernel == "" {
		guestKernel = "(not reported)"
	}
	return []string{
		"**IPVS mode sync cost** (`" + Command + "`)",
		"Date: " + time.Now().UTC().Format("2006-01-02 15:04 MST") + fmt.Sprintf(", the run took %.1f min", took.Minutes()),
		"Host: " + benchtable.Machine(),
		fmt.Sprintf("Guest: user-mode-linux, Linux %s, 1 CPU, %s RAM; its syscalls are about 60× slower than the host's", guestKernel, s.GuestMem),
		"Settings: " + s.String(),
	}
}

// tableNotes say what each column measures.
func tableNotes(s Settings) []string {
	return []string{
		fmt.Sprintf("Each service port is a TCP ClusterIP with %d ready endpoints on another node; IPv4 only.", EndpointsPerPort),
		fmt.Sprintf("desired-state build: desired.Build of the whole snapshot on the host (median of %d).", BuildRuns),
		"full apply: the first reconcile.Sync into an empty network namespace (virtual servers, real servers, kube-ipvs0 addresses, ipset members), then read back and checked.",
		fmt.Sprintf("one-endpoint change: one port's endpoint swapped, an incremental sync (mean of %d, alternating two endpoints); ops are the calls on the kernel handles,"+
			" each one netlink request.", s.Changes),
		"no-change resync: an incremental sync with nothing changed. periodic full resync: the kernel re-read (one listing per virtual server;" +
			" ensures are kube-ipvs0's and the ipsets' create-if-missing calls) with nothing changed.",
		"Guest times are upper bounds for a real node: the guest's syscalls are about 60× slower.",
	}
}
