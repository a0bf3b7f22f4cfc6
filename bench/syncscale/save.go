package syncscale

import (
	"strings"
)

// isKubeletChain says whether a KUBE- chain is kubelet's, not a proxy's;
// the legacy rows add KUBE-IPTABLES-HINT themselves, as kubelet would.
func isKubeletChain(name string) bool {
	switch name {
	case "KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY", "KUBE-FIREWALL", "KUBE-MARK-DROP":
		return true
	}
	return false
}

// TableStats summarises one table of an iptables-save dump.
type TableStats struct {
	// Rules counts "-A" lines, Chains ":" declarations.
	Rules, Chains int
	// Bytes is the size of the table's section, "*table" to "COMMIT".
	Bytes int
	// ProxyLines counts declarations and rules naming a proxy's KUBE-
	// chain (any but kubelet's).
	ProxyLines int
	// ServiceJumps counts KUBE-SERVICES rules jumping to a KUBE-SVC- chain:
	// one per service port with endpoints.
	ServiceJumps int
}

// Dump is an iptables-save dump, per table.
type Dump map[string]TableStats

// ParseSave summarises iptables-save output. Comment lines ("# Generated
// by…", warnings) count for no table.
func ParseSave(text string) Dump {
	d := Dump{}
	table := ""
	var cur TableStats
	for line := range strings.Lines(text) {
		switch {
		case strings.HasPrefix(line, "#"):
			continue
		case strings.HasPrefix(line, "*"):
			table = strings.TrimSpace(line[1:])
			cur = TableStats{}
		case table == "":
			continue
		}
		cur.Bytes += len(line)
		switch {
		case strings.HasPrefix(line, ":"):
			cur.Chains++
		case strings.HasPrefix(line, "-A "):
			cur.Rules++
			if strings.HasPrefix(line, "-A KUBE-SERVICES ") && strings.Contains(line, " -j KUBE-SVC-") {
				cur.ServiceJumps++
			}
		case strings.TrimSpace(line) == "COMMIT":
			d[table] = cur
			table = ""
			continue
		}
		if namesProxyChain(line) {
			cur.ProxyLines++
		}
	}
	return d
}

// namesProxyChain says whether a declaration or rule names a KUBE- chain
// that is not kubelet's.
func namesProxyChain(line string) bool {
	for _, f := range strings.Fields(line) {
		f = strings.TrimPrefix(f, ":")
		if strings.HasPrefix(f, "KUBE-") && !isKubeletChain(f) {
			return true
		}
	}
	return false
}

// Total adds the stats of the named tables.
func (d Dump) Total(tables ...string) TableStats {
	var t TableStats
	for _, name := range tables {
		s := d[name]
		t.Rules += s.Rules
		t.Chains += s.Chains
		t.Bytes += s.Bytes
		t.ProxyLines += s.ProxyLines
		t.ServiceJumps += s.ServiceJumps
	}
	return t
}

// ProxyLines counts the proxy lines of every table.
func (d Dump) ProxyLines() int {
	n := 0
	for _, s := range d {
		n += s.ProxyLines
	}
	return n
}
