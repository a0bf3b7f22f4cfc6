package ipvsref

import (
	"fmt"
	"net"
	"os/exec"
	"strings"

	"kproxy.dev/kproxy/sync/sysctl"
)

// Section is one normalised part of a namespace's state.
type Section struct {
	Name  string
	Lines []string
}

// DummyLink is the link both proxies bind service addresses to.
const DummyLink = "kube-ipvs0"

// SaveCommand is an iptables-save command and the family it dumps.
type SaveCommand struct {
	Family  string // "IPv4" or "IPv6", for section names
	Command string // e.g. "iptables-legacy-save"
}

// sysctlNames are the settings kube-proxy's IPVS mode writes
// (net/ipv4/vs/*, forwarding, strict ARP's two), read back as they are.
func sysctlNames() []string {
	return []string{
		"net/ipv4/vs/conntrack",
		"net/ipv4/vs/conn_reuse_mode",
		"net/ipv4/vs/expire_nodest_conn",
		"net/ipv4/vs/expire_quiescent_template",
		"net/ipv4/ip_forward",
		"net/ipv4/conf/all/arp_ignore",
		"net/ipv4/conf/all/arp_announce",
	}
}

// unorderedChains are chains whose rules a proxy may write in any order:
// kube-proxy writes one rule per service there, in Go map order.
func unorderedChains() map[string]bool {
	return map[string]bool{"KUBE-IPVS-OUT-FILTER": true}
}

// probe is one section's dump: a command and its normaliser.
type probe struct {
	name string
	dump func() ([]string, error)
}

// Capture dumps the IPVS mode's state in the current network namespace.
func Capture(saves []SaveCommand) ([]Section, error) {
	probes := []probe{
		{"IPVS virtual servers (ipvsadm -Sn)", commandProbe(NormalizeIPVS, "ipvsadm", "-Sn")},
		{"ipset headers (ipset list -t)", commandProbe(NormalizeIPSetHeaders, "ipset", "list", "-t")},
		{"ipset members (ipset save)", commandProbe(NormalizeIPSetMembers, "ipset", "save")},
		{DummyLink + " (ip -d addr)", func() ([]string, error) { return linkState(DummyLink) }},
	}
	for _, save := range saves {
		for _, table := range []string{"nat", "filter"} {
			probes = append(probes, probe{
				fmt.Sprintf("%s %s table (%s)", save.Family, table, save.Command),
				commandProbe(func(out string) ([]string, error) { return NormalizeIPTables(out, unorderedChains()) },
					save.Command, "-t", table),
			})
		}
	}
	probes = append(probes, probe{"sysctls", func() ([]string, error) { return readSysctls(sysctlNames()), nil }})

	var sections []Section
	for _, p := range probes {
		lines, err := p.dump()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p.name, err)
		}
		sections = append(sections, Section{Name: p.name, Lines: lines})
	}
	return sections, nil
}

// commandProbe runs a command and normalises its output.
func commandProbe(normalize func(string) ([]string, error), name string, args ...string) func() ([]string, error) {
	return func() ([]string, error) {
		out, err := output(name, args...)
		if err != nil {
			return nil, err
		}
		return normalize(out)
	}
}

// linkState is the normalised `ip -d addr` of link, or one line saying it
// does not exist.
func linkState(link string) ([]string, error) {
	if _, err := net.InterfaceByName(link); err != nil {
		return NormalizeLink("")
	}
	out, err := output("ip", "-j", "-d", "addr", "show", "dev", link)
	if err != nil {
		return nil, err
	}
	return NormalizeLink(out)
}

// readSysctls reads each setting; one the kernel lacks says so in place.
func readSysctls(names []string) []string {
	var out []string
	for _, name := range names {
		v, err := (sysctl.Proc{}).Read(name)
		if err != nil {
			out = append(out, name+" (unreadable)")
			continue
		}
		out = append(out, name+" = "+v)
	}
	return out
}

// output runs a command and returns its stdout, or an error with stderr.
func output(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return string(out), nil
}
