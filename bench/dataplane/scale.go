package dataplane

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"kproxy.dev/kproxy/bench/benchtable"
)

// The scale benchmark (BenchmarkDataPlaneScale): new-connection and new UDP
// flow rates through one service while the node holds many others, for the
// paths whose cost per new flow may grow with the number of services. Each
// (path, number of services) pair runs on a node of its own (a fresh network
// namespace), so no path pays for another's rules, and the local-portal path
// runs on a node with no netfilter rule at all.

// ScaleEnv lists the numbers of services to measure besides one:
// "10000" (the default) or "10000,30000".
const ScaleEnv = "KPROXY_DATAPLANE_SCALE"

// maxScale bounds the services one node gets: padding VIPs come from
// 198.18.64.0 upwards and endpoints from 198.19.128.0/17.
const maxScale = 32000

// ParseScales reads ScaleEnv's value: the numbers of services, ascending,
// always starting with 1 (every ratio needs the one-service rates).
func ParseScales(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		s = "10000"
	}
	out := []int{1}
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxScale {
			return nil, fmt.Errorf("%s=%q: %q is not a number of services from 1 to %d", ScaleEnv, s, f, maxScale)
		}
		if !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out, nil
}

// ScalePaths are the scale table's columns: kernel NAT with kube-proxy's
// rule shape (hand-written and kproxy's iptables mode), kproxy's nftables
// mode (kube-proxy's nftables ruleset: a verdict map lookup per new flow,
// not a walk over the services' rules), and the userspace mode with each
// kind of portal.
func ScalePaths() []Path { return []Path{DNAT, KproxyIPTables, KproxyNFTables, Kproxy, KproxyLocal} }

// kernelPath says whether p's traffic is carried by kernel NAT from
// kproxy's rules, with no kproxy process on the data path.
func kernelPath(p Path) bool { return p == KproxyIPTables || p == KproxyNFTables }

// ScaleConfig is one node of the scale benchmark: a path with this many
// services programmed, the measured one among them.
type ScaleConfig struct {
	Path     Path
	Services int
}

func (c ScaleConfig) String() string { return fmt.Sprintf("%s@%d", c.Path, c.Services) }

// ParseScaleConfig reads ScaleConfig.String's format.
func ParseScaleConfig(s string) (ScaleConfig, error) {
	p, n, ok := strings.Cut(s, "@")
	services, err := strconv.Atoi(n)
	if !ok || err != nil || services < 1 || services > maxScale || !slices.Contains(ScalePaths(), Path(p)) {
		return ScaleConfig{}, fmt.Errorf("scale configuration %q: want path@services, path one of %v, services 1..%d", s, ScalePaths(), maxScale)
	}
	return ScaleConfig{Path: Path(p), Services: services}, nil
}

// padVIP and padEndpoint are the i-th other service's cluster IP and only
// endpoint (i from 0): nothing answers on the endpoints, no traffic goes to
// them.
func padVIP(i int) netip.Addr      { return addrPlus(netip.MustParseAddr("198.18.64.0"), i) }
func padEndpoint(i int) netip.Addr { return addrPlus(netip.MustParseAddr("198.19.128.1"), i) }

func addrPlus(a netip.Addr, i int) netip.Addr {
	b := a.As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(i)
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// padPort is every other service's one port (TCP, like most services').
const padPort = 80

// measuredService is the measured service's name: it sorts after the
// "pad-" services, so in kproxy's name-ordered rules (and the hand-written
// reference) its rule is the last one a new flow is matched against.
const measuredService = "zz-bench"

// ScaleServicesYAML is the services file for n services: n-1 others, one
// TCP port and one endpoint each, then the measured one on vip (ports http
// and udp, endpoint backend). kproxy's iptables mode keeps the order it
// reads services in (its userspace portals sort by name): last in the file
// and last by name, the measured service's rules come last either way.
func ScaleServicesYAML(n int, vip, backend netip.Addr, httpPort, udpPort int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nkind: Node\nmetadata: {name: node}\nstatus: {addresses: [{type: InternalIP, address: 198.19.0.1}]}\n")
	for i := range n - 1 {
		fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: pad-%05[1]d, namespace: default}
spec:
  clusterIP: %[2]s
  ports: [{name: http, port: %[4]d, protocol: TCP, targetPort: %[4]d}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: pad-%05[1]d-1, namespace: default, labels: {kubernetes.io/service-name: pad-%05[1]d}}
addressType: IPv4
ports: [{name: http, port: %[4]d, protocol: TCP}]
endpoints: [{addresses: [%[3]s], nodeName: other}]
`, i, padVIP(i), padEndpoint(i), padPort)
	}
	fmt.Fprintf(&b, `---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: default}
spec:
  clusterIP: %[2]s
  ports:
  - {name: http, port: %[4]d, protocol: TCP, targetPort: %[4]d}
  - {name: udp, port: %[5]d, protocol: UDP, targetPort: %[5]d}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %[1]s-1, namespace: default, labels: {kubernetes.io/service-name: %[1]s}}
addressType: IPv4
ports:
- {name: http, port: %[4]d, protocol: TCP}
- {name: udp, port: %[5]d, protocol: UDP}
endpoints:
- {addresses: [%[3]s], nodeName: other}
`, measuredService, vip, backend, httpPort, udpPort)
	return b.String()
}

// ScaleDNATRules is the hand-written reference for n services, as an
// iptables-restore payload: the shape kube-proxy's iptables mode gives a
// ClusterIP service with one endpoint (a KUBE-SERVICES rule per service port
// jumping to a KUBE-SVC chain, which jumps to a KUBE-SEP chain that marks
// hairpin traffic for masquerading and DNATs), the n-1 other services first
// and the measured one's two ports last, then the NodePort jump that closes
// KUBE-SERVICES.
func ScaleDNATRules(n int, vip, backend netip.Addr, httpPort, udpPort int) string {
	type svcPort struct {
		name     string
		vip, ep  netip.Addr
		proto    string
		port, id int
	}
	var ports []svcPort
	for i := range n - 1 {
		ports = append(ports, svcPort{fmt.Sprintf("default/pad-%05d:http", i), padVIP(i), padEndpoint(i), "tcp", padPort, i})
	}
	ports = append(ports,
		svcPort{"default/" + measuredService + ":http", vip, backend, "tcp", httpPort, n - 1},
		svcPort{"default/" + measuredService + ":udp", vip, backend, "udp", udpPort, n})
	var chains, rules strings.Builder
	chains.WriteString("*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-NODEPORTS - [0:0]\n:KUBE-POSTROUTING - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n")
	rules.WriteString(`-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A OUTPUT -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment "kubernetes postrouting rules" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment "kubernetes service traffic requiring SNAT" -j MASQUERADE --random-fully
`)
	for _, p := range ports {
		svc, sep := fmt.Sprintf("KUBE-SVC-BENCH%07d", p.id), fmt.Sprintf("KUBE-SEP-BENCH%07d", p.id)
		ep := netip.AddrPortFrom(p.ep, uint16(p.port))
		fmt.Fprintf(&chains, ":%s - [0:0]\n:%s - [0:0]\n", svc, sep)
		fmt.Fprintf(&rules, "-A KUBE-SERVICES -d %s/32 -p %s -m comment --comment \"%s cluster IP\" -m %s --dport %d -j %s\n",
			p.vip, p.proto, p.name, p.proto, p.port, svc)
		fmt.Fprintf(&rules, "-A %s -m comment --comment \"%s -> %s\" -j %s\n", svc, p.name, ep, sep)
		fmt.Fprintf(&rules, "-A %s -s %s/32 -m comment --comment %s -j KUBE-MARK-MASQ\n", sep, p.ep, p.name)
		fmt.Fprintf(&rules, "-A %s -p %s -m comment --comment %s -m %s -j DNAT --to-destination %s\n", sep, p.proto, p.name, p.proto, ep)
	}
	rules.WriteString("-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n")
	return chains.String() + rules.String() + "COMMIT\n"
}

// ScaleMetric is one quantity of the scale table, measured at each number
// of services.
type ScaleMetric struct {
	ID, Title, Unit string
	Decimals        int
	// Rate marks the rows judged by ratios and the target; the others
	// (start-up times) show values only.
	Rate bool
}

// ScaleMetrics are the scale table's quantities, in row order.
func ScaleMetrics() []ScaleMetric {
	return []ScaleMetric{
		{ID: "newconn-rate", Title: "new-connection requests, wrk `Connection: close`", Unit: "req/s", Rate: true},
		{ID: "udp-flows-rate", Title: "new UDP flows, one 64-byte request/response each", Unit: "flows/s", Rate: true},
		{ID: "startup", Title: "start-up: rules, routes and relays in place", Unit: "s", Decimals: 1},
		{ID: "proxy-fds", Title: "kproxy's open descriptors", Unit: "fds"},
		{ID: "rule-position", Title: "the measured service's first KUBE-SERVICES rule", Unit: "position"},
		{ID: "node-rules", Title: "netfilter rules on the node", Unit: "iptables-save -A lines"},
		{ID: "local-routes", Title: "kproxy's local routes", Unit: "proto 107"},
	}
}

// userspaceFDs is how many descriptors kproxy's userspace mode needs for
// ports service ports with loops event loops per relay (up to GOMAXPROCS):
// a listener and one duplicate per loop each (measured: 3 per port on 2
// cores), plus what the runs add: two per proxied connection, one per UDP
// flow until it idles out (thousands at the new-flow rates measured).
func userspaceFDs(ports, loops int) int { return ports*(1+loops) + scaleFDHeadroom }

const scaleFDHeadroom = 3000

// fittingScale is the largest whole thousand of services (the measured
// service's two ports and one each for the others) whose userspace relays
// fit limit descriptors, 0 if not even 1,000 do.
func fittingScale(limit, loops int) int {
	n := ((limit-scaleFDHeadroom)/(1+loops) - 1) / 1000 * 1000
	if n < 1000 {
		return 0
	}
	return n
}

// ScaleRowID is the roundValues/ScaleTable key of metric at n services.
func ScaleRowID(metric string, n int) string { return fmt.Sprintf("%s@%d", metric, n) }

// ScaleTable collects the scale benchmark's values and renders them.
type ScaleTable struct {
	Header, Notes []string
	// Scales are the numbers of services, ascending, the first 1.
	Scales []int
	// Subject is the path the target judges: within MaxDrop of its own
	// one-service rate, and ahead of every other column, at every larger
	// number of services.
	Subject Path
	MaxDrop float64
	values  map[string]map[Path]float64
	skipped map[int]map[Path]string
}

// Skip marks p as not run at n services, for the short reason shown in its
// cells.
func (t *ScaleTable) Skip(n int, p Path, reason string) {
	if t.skipped == nil {
		t.skipped = map[int]map[Path]string{}
	}
	if t.skipped[n] == nil {
		t.skipped[n] = map[Path]string{}
	}
	t.skipped[n][p] = reason
}

// Set records metric's value for p at n services.
func (t *ScaleTable) Set(metric string, n int, p Path, v float64) {
	if t.values == nil {
		t.values = map[string]map[Path]float64{}
	}
	id := ScaleRowID(metric, n)
	if t.values[id] == nil {
		t.values[id] = map[Path]float64{}
	}
	t.values[id][p] = v
}

// Get returns metric's value for p at n services, if measured.
func (t *ScaleTable) Get(metric string, n int, p Path) (float64, bool) {
	v, ok := t.values[ScaleRowID(metric, n)][p]
	return v, ok
}

// ratio is metric's value for p at n over ref's at one service.
func (t *ScaleTable) ratio(metric string, n int, p, ref Path) (float64, bool) {
	v, ok := t.Get(metric, n, p)
	r, rok := t.Get(metric, 1, ref)
	if !ok || !rok || r == 0 {
		return 0, false
	}
	return v / r, true
}

// scaleTitle is a column heading: the DNAT column is kube-proxy-shaped here.
func scaleTitle(p Path) string {
	if p == DNAT {
		return "iptables DNAT, kube-proxy-shaped rules"
	}
	return p.Title()
}

// Markdown renders the header, the table and the notes.
func (t *ScaleTable) Markdown() string {
	tab := benchtable.Table{Header: []string{"measurement"}, Right: []bool{false}}
	for _, p := range ScalePaths() {
		tab.Header, tab.Right = append(tab.Header, scaleTitle(p)), append(tab.Right, true)
	}
	tab.Header, tab.Right = append(tab.Header, shortTitle(t.Subject)+" target"), append(tab.Right, false)
	for _, m := range ScaleMetrics() {
		for _, n := range t.Scales {
			row := []string{fmt.Sprintf("%s, %s (%s)", m.Title, benchtable.Services(n), m.Unit)}
			for _, p := range ScalePaths() {
				row = append(row, t.cell(m, n, p))
			}
			tab.Rows = append(tab.Rows, append(row, t.target(m, n)))
		}
	}
	return benchtable.Page(t.Header, tab.Markdown(), t.Notes)
}

func shortTitle(p Path) string {
	if p == KproxyLocal {
		return "local portals"
	}
	return p.Title()
}

// cell is the value, and for rates its share of DNAT's one-service rate
// (and at more services, of the path's own one-service rate).
func (t *ScaleTable) cell(m ScaleMetric, n int, p Path) string {
	v, ok := t.Get(m.ID, n, p)
	if !ok {
		if why := t.skipped[n][p]; why != "" {
			return "— (" + why + ")"
		}
		return "—"
	}
	s := formatValue(v, m.Decimals)
	if !m.Rate {
		return s
	}
	ofDNAT, dok := t.ratio(m.ID, n, p, DNAT)
	if n == 1 {
		if dok && p != DNAT {
			s += fmt.Sprintf(" (%.0f%%)", 100*ofDNAT)
		}
		return s
	}
	own, ook := t.ratio(m.ID, n, p, p)
	switch {
	case dok && ook:
		s += fmt.Sprintf(" (%.0f%% / %.0f%%)", 100*ofDNAT, 100*own)
	case ook:
		s += fmt.Sprintf(" (— / %.0f%%)", 100*own)
	}
	return s
}

// target judges the subject at more than one service: its rate within
// MaxDrop of its own one-service rate, and ahead of every other path
// measured at the same number of services.
func (t *ScaleTable) target(m ScaleMetric, n int) string {
	if !m.Rate || n == 1 {
		return ""
	}
	own, ok := t.ratio(m.ID, n, t.Subject, t.Subject)
	if !ok {
		return "not measured"
	}
	s := fmt.Sprintf("≥ %.0f%% of own 1-service rate: %.0f%% %s", 100*(1-t.MaxDrop), 100*own, benchtable.Mark(own >= 1-t.MaxDrop-1e-9))
	v, _ := t.Get(m.ID, n, t.Subject)
	var best Path
	var bestV float64
	for _, p := range ScalePaths() {
		if o, ok := t.Get(m.ID, n, p); ok && p != t.Subject && (best == "" || o > bestV) {
			best, bestV = p, o
		}
	}
	switch {
	case best == "":
	case v > bestV:
		s += fmt.Sprintf("; ahead of every other path (next: %s, %.2f×) ✓", scaleTitle(best), v/bestV)
	default:
		s += fmt.Sprintf("; behind %s (%.2f×) ✗", scaleTitle(best), v/bestV)
	}
	return s
}
