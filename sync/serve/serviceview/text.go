package serviceview

import (
	"cmp"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"kproxy.dev/kproxy/sync/mode"
)

// WriteText writes p as a table for people: a block per service port, one
// line per address kind, endpoint, chain, virtual server or relay.
func WriteText(w io.Writer, p Page) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	node := p.Node
	node = cmp.Or(node, "(unnamed)")
	fmt.Fprintf(tw, "mode %s, node %s, snapshot generation %d, %d service port(s)\n", p.Mode, node, p.Generation, len(p.ServicePorts))
	for _, sp := range p.ServicePorts {
		writePort(tw, sp)
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the services table: %w", err)
	}
	return nil
}

func writePort(w io.Writer, sp ServicePort) {
	name := sp.Namespace + "/" + sp.Name
	if sp.PortName != "" {
		name += ":" + sp.PortName
	}
	fmt.Fprintf(w, "\n%s/%s\n", name, sp.Protocol)
	row := func(key, value string) { fmt.Fprintf(w, "  %s\t%s\n", key, value) }
	port := strconv.Itoa(int(sp.Port))
	withPort := func(ips []string) string {
		out := make([]string, len(ips))
		for i, ip := range ips {
			out[i] = net.JoinHostPort(ip, port)
		}
		return strings.Join(out, " ")
	}
	if len(sp.ClusterIPs) > 0 {
		row("cluster IPs", withPort(sp.ClusterIPs))
	} else {
		row("cluster IPs", "none (headless or unparsed)")
	}
	if sp.NodePort != 0 {
		row("node port", strconv.Itoa(int(sp.NodePort)))
	}
	if len(sp.ExternalIPs) > 0 {
		row("external IPs", withPort(sp.ExternalIPs))
	}
	if len(sp.HiddenExternalIPs) > 0 {
		row("external IPs", withPort(sp.HiddenExternalIPs)+" (not programmed: AllowServiceExternalIPs is off)")
	}
	if len(sp.LoadBalancerIPs) > 0 {
		v := withPort(sp.LoadBalancerIPs)
		if len(sp.LoadBalancerSourceRanges) > 0 {
			v += " from " + strings.Join(sp.LoadBalancerSourceRanges, " ")
		}
		row("load balancer", v)
	}
	policies := "internal " + sp.InternalTrafficPolicy
	if sp.ExternalTrafficPolicy != "" {
		policies += ", external " + sp.ExternalTrafficPolicy
	}
	if sp.HealthCheckNodePort != 0 {
		policies += fmt.Sprintf(" (health check node port %d)", sp.HealthCheckNodePort)
	}
	row("traffic policy", policies)
	affinity := sp.SessionAffinity
	if sp.AffinityTimeoutSeconds > 0 {
		affinity += fmt.Sprintf(" for %ds", sp.AffinityTimeoutSeconds)
	}
	row("affinity", affinity)
	writeEndpoints(w, sp.Endpoints)
	writeProgrammed(w, sp.Programmed)
}

func writeEndpoints(w io.Writer, eps []Endpoint) {
	if len(eps) == 0 {
		fmt.Fprintf(w, "  endpoints\tnone\n")
		return
	}
	ready, local := 0, 0
	for _, ep := range eps {
		if ep.Ready {
			ready++
		}
		if ep.Local {
			local++
		}
	}
	fmt.Fprintf(w, "  endpoints\t%d (%d ready, %d on this node)\n", len(eps), ready, local)
	for _, ep := range eps {
		where := "remote"
		if ep.Local {
			where = "local"
		}
		topo := []string{}
		if ep.Node != "" {
			topo = append(topo, "node="+ep.Node)
		}
		if ep.Zone != "" {
			topo = append(topo, "zone="+ep.Zone)
		}
		if len(ep.ZoneHints) > 0 {
			topo = append(topo, "hints.zones="+strings.Join(ep.ZoneHints, ","))
		}
		if len(ep.NodeHints) > 0 {
			topo = append(topo, "hints.nodes="+strings.Join(ep.NodeHints, ","))
		}
		fmt.Fprintf(w, "  \t%s\t%s\t%s\t%s\n", ep.Address, endpointState(ep), where, strings.Join(topo, " "))
	}
}

// endpointState words the conditions as kubectl's columns would be read.
func endpointState(ep Endpoint) string {
	var s []string
	if ep.Ready {
		s = append(s, "ready")
	} else {
		s = append(s, "not-ready")
	}
	if ep.Serving && !ep.Ready {
		s = append(s, "serving")
	}
	if ep.Terminating {
		s = append(s, "terminating")
	}
	return strings.Join(s, ",")
}

func writeProgrammed(w io.Writer, p mode.Programmed) {
	key := func(first bool, k string) string {
		if first {
			return k
		}
		return ""
	}
	for i, c := range p.Chains {
		fmt.Fprintf(w, "  %s\t%s %s %s\n", key(i == 0, "chains"), c.Family, c.Table, c.Name)
	}
	for i, vs := range p.VirtualServers {
		v := fmt.Sprintf("%s %s %s", vs.Family, vs.Address, vs.Scheduler)
		if vs.PersistenceSeconds > 0 {
			v += fmt.Sprintf(" persistent %ds", vs.PersistenceSeconds)
		}
		rs := make([]string, len(vs.RealServers))
		for j, r := range vs.RealServers {
			rs[j] = r.Address
			if r.Weight == 0 {
				rs[j] += "(draining)"
			}
		}
		if len(rs) == 0 {
			rs = []string{"none"}
		}
		fmt.Fprintf(w, "  %s\t%s -> %s\n", key(i == 0, "virtual servers"), v, strings.Join(rs, " "))
	}
	for i, r := range p.Relays {
		v := fmt.Sprintf("%s %s, %s portal", r.Family, r.Class, r.Portal)
		if r.ProxyPort != 0 {
			v += fmt.Sprintf(", proxy port %d", r.ProxyPort)
		}
		if len(r.Listen) > 0 {
			v += ", on " + strings.Join(r.Listen, " ")
		}
		fmt.Fprintf(w, "  %s\t%s\n", key(i == 0, "relays"), v)
	}
	if c := p.Counters; c != nil {
		v := fmt.Sprintf("connections %d, flows %d, active %d, dial failures %d, bytes %d to endpoints %d to clients",
			c.Connections, c.Flows, c.Active, c.DialFailures, c.BytesToEndpoint, c.BytesToClient)
		reasons := make([]string, 0, len(c.Refused))
		for r, n := range c.Refused {
			reasons = append(reasons, fmt.Sprintf("%s=%d", r, n))
		}
		slices.Sort(reasons)
		if len(reasons) > 0 {
			v += ", refused " + strings.Join(reasons, " ")
		}
		fmt.Fprintf(w, "  counters\t%s\n", v)
	}
	if p.Note != "" {
		fmt.Fprintf(w, "  note\t%s\n", p.Note)
	}
}
