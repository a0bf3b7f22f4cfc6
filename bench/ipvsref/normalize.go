package ipvsref

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// The normalisers turn one command's output into lines that compare equal
// when two namespaces hold the same state: kernel hash order sorted away,
// random values (ipset initval, MAC addresses) and counters dropped.

// NormalizeIPVS takes `ipvsadm -Sn` and returns each virtual server
// ("-A ...") followed by its real servers ("  -a ..."), both sorted.
func NormalizeIPVS(save string) ([]string, error) {
	type service struct {
		line  string
		reals []string
	}
	var services []*service
	for _, line := range nonEmptyLines(save) {
		switch {
		case strings.HasPrefix(line, "-A "):
			services = append(services, &service{line: line})
		case strings.HasPrefix(line, "-a "):
			if len(services) == 0 {
				return nil, fmt.Errorf("ipvsadm -Sn: real server before any virtual server: %q", line)
			}
			last := services[len(services)-1]
			last.reals = append(last.reals, "  "+line)
		default:
			return nil, fmt.Errorf("ipvsadm -Sn: unexpected line %q", line)
		}
	}
	slices.SortFunc(services, func(a, b *service) int { return strings.Compare(a.line, b.line) })
	var out []string
	for _, s := range services {
		out = append(out, s.line)
		out = append(out, slices.Sorted(slices.Values(s.reals))...)
	}
	return out, nil
}

// NormalizeIPSetHeaders takes `ipset list -t` and returns one line per
// KUBE-* set: name, type, revision, header (without its random initval)
// and how many rules reference it, sorted by name. The revision matters:
// the kernel gives a set of an older revision fewer features.
func NormalizeIPSetHeaders(list string) ([]string, error) {
	var out []string
	var name string
	fields := map[string]string{}
	flush := func() error {
		if name == "" {
			return nil
		}
		for _, key := range []string{"Type", "Revision", "Header", "References"} {
			if _, ok := fields[key]; !ok {
				return fmt.Errorf("ipset list -t: set %s has no %s line", name, key)
			}
		}
		if strings.HasPrefix(name, "KUBE-") {
			header := strings.Fields(fields["Header"])
			if i := slices.Index(header, "initval"); i >= 0 && i+1 < len(header) {
				header = slices.Delete(header, i, i+2)
			}
			out = append(out, fmt.Sprintf("%s %s revision %s %s references %s",
				name, fields["Type"], fields["Revision"], strings.Join(header, " "), fields["References"]))
		}
		name, fields = "", map[string]string{}
		return nil
	}
	for _, line := range nonEmptyLines(list) {
		key, value, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("ipset list -t: unexpected line %q", line)
		}
		value = strings.TrimSpace(value)
		if key == "Name" {
			if err := flush(); err != nil {
				return nil, err
			}
			name = value
			continue
		}
		if name == "" {
			return nil, fmt.Errorf("ipset list -t: %q before any Name line", line)
		}
		fields[key] = value
	}
	if err := flush(); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return out, nil
}

// NormalizeIPSetMembers takes `ipset save` and returns the members of the
// KUBE-* sets as "NAME member", sorted.
func NormalizeIPSetMembers(save string) ([]string, error) {
	var out []string
	for _, line := range nonEmptyLines(save) {
		f := strings.Fields(line)
		if len(f) < 2 || (f[0] != "create" && f[0] != "add") {
			return nil, fmt.Errorf("ipset save: unexpected line %q", line)
		}
		if f[0] == "add" && strings.HasPrefix(f[1], "KUBE-") {
			out = append(out, strings.Join(f[1:], " "))
		}
	}
	slices.Sort(out)
	return out, nil
}

// linkJSON is the part of `ip -j -d addr show dev X` the comparison reads.
type linkJSON struct {
	Flags     []string `json:"flags"`
	MTU       int      `json:"mtu"`
	Operstate string   `json:"operstate"`
	LinkInfo  struct {
		Kind string `json:"info_kind"`
	} `json:"linkinfo"`
	Addrs []struct {
		Family    string `json:"family"`
		Local     string `json:"local"`
		PrefixLen int    `json:"prefixlen"`
		Scope     string `json:"scope"`
	} `json:"addr_info"`
}

// NormalizeLink takes `ip -j -d addr show dev X` and returns the link's
// kind, flags, MTU and state, then its addresses sorted; no MAC address,
// index or lifetimes. An empty output (no such link) is one line saying so.
func NormalizeLink(ipJSON string) ([]string, error) {
	if strings.TrimSpace(ipJSON) == "" {
		return []string{"(no such link)"}, nil
	}
	var links []linkJSON
	if err := json.Unmarshal([]byte(ipJSON), &links); err != nil {
		return nil, fmt.Errorf("ip -j addr: %w", err)
	}
	if len(links) != 1 {
		return nil, fmt.Errorf("ip -j addr: %d links, want 1", len(links))
	}
	l := links[0]
	out := []string{
		"kind " + l.LinkInfo.Kind,
		"flags " + strings.Join(slices.Sorted(slices.Values(l.Flags)), ","),
		fmt.Sprintf("mtu %d", l.MTU),
		"state " + l.Operstate,
	}
	var addrs []string
	for _, a := range l.Addrs {
		addrs = append(addrs, fmt.Sprintf("%s %s/%d scope %s", a.Family, a.Local, a.PrefixLen, a.Scope))
	}
	return append(out, slices.Sorted(slices.Values(addrs))...), nil
}

// NormalizeIPTables takes one table of iptables-save and returns the KUBE-*
// part: "chain KUBE-..." for each KUBE chain (sorted), then, chain by chain
// (sorted by name), the rules of KUBE chains and the rules of other chains
// that mention a KUBE name, in table order, with counters dropped. The
// rules of the chains in unordered are sorted: their order carries no
// meaning and the proxy writes them in Go map order.
func NormalizeIPTables(save string, unordered map[string]bool) ([]string, error) {
	var chains []string
	rules := map[string][]string{}
	for _, line := range nonEmptyLines(save) {
		switch {
		case strings.HasPrefix(line, "#"), strings.HasPrefix(line, "*"), line == "COMMIT":
		case strings.HasPrefix(line, ":"):
			name, _, _ := strings.Cut(line[1:], " ")
			if strings.HasPrefix(name, "KUBE-") {
				chains = append(chains, "chain "+name)
			}
		case strings.HasPrefix(line, "-A "), strings.HasPrefix(line, "[") && strings.Contains(line, "] -A "):
			if strings.HasPrefix(line, "[") { // iptables-save -c: "[pkts:bytes] -A ..."
				line = line[strings.Index(line, "] ")+2:]
			}
			chain, _, _ := strings.Cut(strings.TrimPrefix(line, "-A "), " ")
			if strings.HasPrefix(chain, "KUBE-") || strings.Contains(line, "KUBE-") {
				rules[chain] = append(rules[chain], line)
			}
		default:
			return nil, fmt.Errorf("iptables-save: unexpected line %q", line)
		}
	}
	out := slices.Sorted(slices.Values(chains))
	for _, chain := range slices.Sorted(maps.Keys(rules)) {
		rs := rules[chain]
		if unordered[chain] {
			rs = slices.Sorted(slices.Values(rs))
		}
		out = append(out, rs...)
	}
	return out, nil
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if line = strings.TrimSpace(line); line != "" {
			out = append(out, line)
		}
	}
	return out
}
