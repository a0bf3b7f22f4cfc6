package load

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"kproxy.dev/kproxy/bench/lab"
)

// timeWaitBuckets caps each lab host's TIME_WAIT sockets: a new-connection
// run leaves tens of thousands for a minute, and the next run collides
// with them (bench/dataplane measured the first path of a round up to 3×
// faster without the cap).
const timeWaitBuckets = 1024

// hostSysctls are set on node, client and backends: room for the
// new-connection runs' churn (more ephemeral ports, TIME_WAIT reuse, the
// cap above).
func hostSysctls() []string {
	return []string{"net.ipv4.ip_local_port_range=10000 65000", "net.ipv4.tcp_tw_reuse=1",
		fmt.Sprintf("net.ipv4.tcp_max_tw_buckets=%d", timeWaitBuckets)}
}

// conntrackSysctls are set on the node where it has conntrack: short
// timeouts keep the new-connection and new-flow runs from filling the
// (global) conntrack table, and keep a reused source pair new to it.
func conntrackSysctls() []string {
	return []string{"net.netfilter.nf_conntrack_tcp_timeout_time_wait=2",
		"net.netfilter.nf_conntrack_udp_timeout=2", "net.netfilter.nf_conntrack_udp_timeout_stream=2"}
}

// PrepareHosts sets what the workloads need on a lab topology: the
// sysctls above on node, client and backends, short conntrack timeouts on
// the node (skipped if it has no conntrack), and the new-UDP-flow source
// addresses on the client's eth0. It may be called again on the same
// topology.
func PrepareHosts(topo *lab.Topology) error {
	hosts := append([]*lab.Host{topo.Node, topo.Client}, topo.Backends...)
	for _, h := range hosts {
		if _, err := h.Exec("sysctl", append([]string{"-q", "-w"}, hostSysctls()...)...); err != nil {
			return fmt.Errorf("preparing %s for the load: %w", h, err)
		}
	}
	has, err := hasConntrack(topo.Node)
	if err != nil {
		return err
	}
	if has {
		if _, err := topo.Node.Exec("sysctl", append([]string{"-q", "-w"}, conntrackSysctls()...)...); err != nil {
			return fmt.Errorf("preparing the node's conntrack for the load: %w", err)
		}
	}
	var batch strings.Builder
	for _, a := range udpFlowSources() {
		fmt.Fprintf(&batch, "address replace %s/24 dev eth0\n", a)
	}
	cmd := topo.Client.Command("ip", "-batch", "-")
	cmd.Stdin = strings.NewReader(batch.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("adding the UDP flow sources to %s: %w\n%s", topo.Client, err, clip(string(out)))
	}
	return nil
}

// hasConntrack reports whether h's namespace has conntrack's sysctls
// (netfilter's conntrack module loaded).
func hasConntrack(h *lab.Host) (bool, error) {
	const path = "/proc/sys/net/netfilter/nf_conntrack_udp_timeout"
	var err error
	ierr := h.InNetns(func() error {
		_, err = os.Stat(path)
		return nil
	})
	switch {
	case ierr != nil:
		return false, fmt.Errorf("looking for conntrack on %s: %w", h, ierr)
	case err == nil:
		return true, nil
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	default:
		return false, fmt.Errorf("looking for conntrack on %s: %w", h, err)
	}
}
