package modes

import (
	"context"
	"encoding/hex"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// What the guest section says about the node when a workload through a
// service failed there: the IPVS settings, the connections IPVS and
// conntrack hold for the VIP, the hosts' TCP drop counters, and whether a
// fresh connection through the VIP opens now. One cell's leftovers
// breaking the next cell would show here.

// ipvsSysctls are the IPVS settings that decide what happens to a new
// connection meeting an old entry (ip_vs_core.c's ip_vs_in_hook).
func ipvsSysctls() []string {
	return []string{"conntrack", "conn_reuse_mode", "expire_nodest_conn", "expire_quiescent_template"}
}

// tcpDropCounters are the /proc/net/netstat and /proc/net/snmp counters
// that count SYNs lost or refused on a host.
func tcpDropCounters() []string {
	return []string{"TcpExt:ListenOverflows", "TcpExt:ListenDrops", "TcpExt:TCPTimeWaitOverflow", "TcpExt:TCPSynRetrans",
		"TcpExt:PAWSEstab", "TcpExt:TWRecycled", "Tcp:AttemptFails", "Tcp:OutRsts"}
}

// dataPlaneState is a few lines on the node's state for vip, for an
// error: every part that cannot be read says so in place.
func (d *DataLab) dataPlaneState(ctx context.Context, vip netip.Addr) string {
	var lines []string
	add := func(format string, args ...any) { lines = append(lines, fmt.Sprintf(format, args...)) }

	var settings []string
	for _, name := range ipvsSysctls() {
		settings = append(settings, name+"="+readTrimmed("/proc/sys/net/ipv4/vs/"+name))
	}
	settings = append(settings, "nf_conntrack_count="+readTrimmed("/proc/sys/net/netfilter/nf_conntrack_count"),
		"nf_conntrack_max="+readTrimmed("/proc/sys/net/netfilter/nf_conntrack_max"))
	add("node: %s", strings.Join(settings, " "))

	if table, err := os.ReadFile("/proc/net/ip_vs"); err == nil {
		add("IPVS virtual servers of %s: %s", vip, summarizeIPVSServices(string(table), vip))
	} else {
		add("IPVS virtual servers: %v", err)
	}
	if conns, err := os.ReadFile("/proc/net/ip_vs_conn"); err == nil {
		_, summary := summarizeIPVSConns(string(conns), vip)
		add("IPVS connections to %s: %s", vip, summary)
	} else {
		add("IPVS connections: %v", err)
	}
	if out, err := d.Topo.Node.Exec("conntrack", "-L", "-p", "tcp", "-d", vip.String()); err == nil {
		add("conntrack TCP entries to %s: %s", vip, summarizeConntrack(out))
	} else {
		add("conntrack TCP entries to %s: %v", vip, err)
	}
	for _, h := range []*lab.Host{d.Topo.Client, d.Topo.Node, d.Servers} {
		netstat, err1 := h.Exec("cat", "/proc/net/netstat", "/proc/net/snmp")
		if err1 != nil {
			add("%s: %v", h, err1)
			continue
		}
		add("%s TCP counters: %s", h, pickCounters(netstat, tcpDropCounters()))
	}
	add("fresh connections from the client now: %s", d.probeConnections(ctx, vip))
	return strings.Join(lines, "\n")
}

// probeConnections opens a few connections to vip's HTTP port one after
// the other, each given a generous time, and says how many opened.
func (d *DataLab) probeConnections(ctx context.Context, vip netip.Addr) string {
	const probes = 4
	const timeout = 4 * time.Second
	to := netip.AddrPortFrom(vip, BenchHTTPPort).String()
	opened := 0
	var failures []string
	for range probes {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		start := time.Now()
		c, err := d.Topo.Client.DialContext(cctx, "tcp", to)
		cancel()
		if err != nil {
			failures = append(failures, fmt.Sprintf("%v after %v", err, time.Since(start).Round(10*time.Millisecond)))
			continue
		}
		opened++
		c.Close()
	}
	s := fmt.Sprintf("%d of %d opened", opened, probes)
	if len(failures) > 0 {
		s += " (" + strings.Join(failures, "; ") + ")"
	}
	return s
}

func readTrimmed(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b)), ",")
}

// hexAddrPort decodes /proc/net/ip_vs*'s IPv4 "C612FE01:0050" or the
// address and port columns of ip_vs_conn ("C612FE01", "0050").
func hexAddrPort(addr, port string) (netip.AddrPort, bool) {
	a, err := hex.DecodeString(addr)
	if err != nil || len(a) != 4 {
		return netip.AddrPort{}, false
	}
	p, err := strconv.ParseUint(port, 16, 16)
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte(a)), uint16(p)), true
}

// summarizeIPVSServices is /proc/net/ip_vs's virtual servers on vip, each
// with its real servers' active and inactive connection counts.
func summarizeIPVSServices(table string, vip netip.Addr) string {
	var out []string
	in := false
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && (f[0] == "TCP" || f[0] == "UDP" || f[0] == "SCTP"):
			a, p, _ := strings.Cut(f[1], ":")
			vs, ok := hexAddrPort(a, p)
			in = ok && vs.Addr() == vip
			if in {
				out = append(out, fmt.Sprintf("%s %s:", f[0], vs))
			}
		case in && len(f) >= 6 && f[0] == "->":
			a, p, _ := strings.Cut(f[1], ":")
			if rs, ok := hexAddrPort(a, p); ok {
				out[len(out)-1] += fmt.Sprintf(" %s w%s a%s i%s", rs, f[3], f[4], f[5])
			}
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, "; ")
}

// summarizeIPVSConns counts /proc/net/ip_vs_conn's entries to vip, and
// says how many there are by protocol and state, with the longest time
// one has left.
func summarizeIPVSConns(table string, vip netip.Addr) (int, string) {
	counts := map[string]int{}
	longest := map[string]int{}
	total := 0
	for _, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		// Pro FromIP FPrt ToIP TPrt DestIP DPrt State Expires ...
		if len(f) < 9 || f[0] == "Pro" {
			continue
		}
		to, ok := hexAddrPort(f[3], f[4])
		if !ok || to.Addr() != vip {
			continue
		}
		key := f[0] + " " + f[7]
		counts[key]++
		if s, err := strconv.Atoi(f[8]); err == nil && s > longest[key] {
			longest[key] = s
		}
		total++
	}
	if total == 0 {
		return 0, "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d (up to %d s left)", k, counts[k], longest[k]))
	}
	return total, fmt.Sprintf("%d: %s", total, strings.Join(parts, ", "))
}

// summarizeConntrack counts conntrack -L's TCP entries by state.
func summarizeConntrack(out string) string {
	counts := map[string]int{}
	total := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[0] != "tcp" {
			continue
		}
		counts[f[3]]++
		total++
	}
	if total == 0 {
		return "none"
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, counts[k]))
	}
	return fmt.Sprintf("%d: %s", total, strings.Join(parts, ", "))
}

// pickCounters reads the named "Group:Name" counters from the contents
// of /proc/net/netstat and /proc/net/snmp (a header line of names, then a
// line of values, per group) and lists those that are not zero.
func pickCounters(text string, names []string) string {
	values := map[string]string{}
	var header []string
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		if header == nil || header[0] != f[0] {
			header = f
			continue
		}
		group := strings.TrimSuffix(f[0], ":")
		for i := 1; i < len(f) && i < len(header); i++ {
			values[group+":"+header[i]] = f[i]
		}
		header = nil
	}
	var out []string
	for _, n := range names {
		if v, ok := values[n]; ok && v != "0" {
			out = append(out, strings.TrimPrefix(strings.TrimPrefix(n, "TcpExt:"), "Tcp:")+"="+v)
		}
	}
	if len(out) == 0 {
		return "all zero"
	}
	return strings.Join(out, " ")
}
