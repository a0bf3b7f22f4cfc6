package kernel

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"kproxy.dev/kproxy/sync/ipfamily"
)

// fakeNode answers commands and netlink calls the way a real node with the
// configured gaps does, and records what the probes did and whether they did
// it inside its Sandbox (the throwaway namespace) or in the node's own.
type fakeNode struct {
	// fail maps a substring of a command line to the failure it causes.
	fail map[string]error
	// saves maps a save command to its output.
	saves map[string]string
	// genl errors for successive GenlFamily calls (last one repeats).
	genl          []error
	dummy, ctrack error
	// sctp is SCTP's state: registered (the zero value), only a module
	// the kernel can load, or absent.
	sctp sctpState
	// unloaded are the modules /sys/module does not list.
	unloaded             map[string]bool
	ipv6Off              error // IPv6Off answers it
	dummyExistsOnce      bool
	calls                []call
	unshareErr           error // Do fails with it
	inThrowaway          bool  // inside Do
	links                map[string]bool
	modprobeLoadsIPVS    bool
	genlCalls            int
	probeChainsRemaining map[string]bool // command → probe chains exist
	probeSetExists       bool
	ipset                error // CreateIPSet fails with it
	kernelRelease        string
	nftVersion           string // what nft --version prints
	skLookup             error  // SKLookup fails with it
}

func (n *fakeNode) Run(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	n.calls = append(n.calls, call{line: line, throwaway: n.inThrowaway})
	// A restore fails as the rule commands its lines stand for would: the
	// kernel refuses a target whichever tool hands it over.
	lines := []string{line}
	if tool, ok := strings.CutSuffix(name, "-restore"); ok {
		table := ""
		for _, l := range strings.Split(string(stdin), "\n") {
			if t, ok := strings.CutPrefix(l, "*"); ok {
				table = t
			}
			if strings.HasPrefix(l, "-A ") {
				lines = append(lines, tool+" -w 5 -t "+table+" "+l)
			}
		}
	}
	for sub, err := range n.fail {
		for _, l := range lines {
			if strings.Contains(l, sub) {
				return nil, err
			}
		}
	}
	if n.probeChainsRemaining == nil {
		n.probeChainsRemaining = map[string]bool{}
	}
	switch {
	case strings.HasSuffix(name, "-save"):
		return []byte(n.saves[name]), nil
	case strings.HasSuffix(name, "-restore"):
		in := string(stdin)
		n.probeChainsRemaining[name] = !strings.Contains(in, "-X "+ProbeChain)
	case name == "nft" && len(args) == 1 && args[0] == "--version":
		return []byte(n.nftVersion), nil
	case name == "modprobe":
		if n.modprobeLoadsIPVS {
			n.genl = []error{nil}
		}
	}
	return nil, nil
}

func (n *fakeNode) GenlFamily(name string) error {
	n.genlCalls++
	if len(n.genl) == 0 {
		return nil
	}
	err := n.genl[0]
	if len(n.genl) > 1 {
		n.genl = n.genl[1:]
	}
	return err
}

// call is one command or netlink change the probes made.
type call struct {
	line      string
	throwaway bool // made in the throwaway namespace
}

// Do implements Sandbox.
func (n *fakeNode) Do(fn func()) error {
	if n.unshareErr != nil {
		return n.unshareErr
	}
	n.inThrowaway = true
	defer func() { n.inThrowaway = false }()
	fn()
	return nil
}

func (n *fakeNode) AddDummyLink(name string) error {
	n.calls = append(n.calls, call{line: "netlink add dummy " + name, throwaway: n.inThrowaway})
	if n.links == nil {
		n.links = map[string]bool{}
	}
	if n.dummyExistsOnce {
		n.dummyExistsOnce = false
		n.links[name] = true
		return syscall.EEXIST
	}
	if n.dummy != nil {
		return n.dummy
	}
	if n.links[name] {
		return syscall.EEXIST
	}
	n.links[name] = true
	return nil
}

// CreateIPSet fails like the kernel's ip_set: a kernel without it answers
// EINVAL (nfnetlink has no such subsystem); an existing set is kept.
func (n *fakeNode) CreateIPSet(name string) error {
	n.calls = append(n.calls, call{line: "netlink ipset create " + name, throwaway: n.inThrowaway})
	if n.ipset != nil {
		return n.ipset
	}
	n.probeSetExists = true
	return nil
}

func (n *fakeNode) DestroyIPSet(name string) error {
	n.calls = append(n.calls, call{line: "netlink ipset destroy " + name, throwaway: n.inThrowaway})
	n.probeSetExists = false
	return nil
}

func (n *fakeNode) DeleteLink(name string) error {
	if !n.links[name] {
		return fmt.Errorf("link %s not found", name)
	}
	delete(n.links, name)
	return nil
}

type sctpState int

const (
	sctpRegistered sctpState = iota
	sctpLoadable
	sctpAbsent
)

func (n *fakeNode) ModuleLoaded(name string) bool { return !n.unloaded[name] }
func (n *fakeNode) ProtocolRegistered(name string) (bool, error) {
	return name == "SCTP" && n.sctp == sctpRegistered, nil
}
func (n *fakeNode) ModuleLoadable(name string) (bool, error) {
	return name == "sctp" && n.sctp == sctpLoadable, nil
}
func (n *fakeNode) IPv6Off() error { return n.ipv6Off }
func (n *fakeNode) KernelRelease() (string, error) {
	if n.kernelRelease == "" {
		return "6.1.0-28-amd64", nil
	}
	return n.kernelRelease, nil
}
func (n *fakeNode) ConntrackStats() error {
	if n.ctrack == nil {
		return nil
	}
	return fmt.Errorf("ctnetlink stats request: %w", n.ctrack)
}

// SKLookup fails as sklookup.Probe does, with the kernel's errno inside.
func (n *fakeNode) SKLookup() error {
	n.calls = append(n.calls, call{line: "bpf sk_lookup probe", throwaway: n.inThrowaway})
	return n.skLookup
}

// exitErr fails like a tool that ran and complained.
func exitErr(cmd, stderr string) error {
	return &CommandError{Command: cmd, ExitCode: 1, Stderr: stderr, Err: fmt.Errorf("exit status 1")}
}

// missingBinary fails like os/exec does for a binary not on PATH.
func missingBinary(cmd string) error {
	return &CommandError{Command: cmd, ExitCode: -1, Err: &exec.Error{Name: cmd, Err: exec.ErrNotFound}}
}

// legacyTableCreators returns the calls that would make the kernel register
// legacy tables for fam: every legacy command but the read-only save.
func legacyTableCreators(calls []call, fam ipfamily.Family) []string {
	var out []string
	for _, c := range calls {
		name, _, _ := strings.Cut(c.line, " ")
		if strings.HasPrefix(name, Legacy.Command(fam)) && name != Legacy.SaveCommand(fam) {
			out = append(out, c.line)
		}
	}
	return out
}

func ran(calls []call, line string) bool {
	for _, c := range calls {
		if c.line == line {
			return true
		}
	}
	return false
}

func ranInThrowaway(calls []call, line string) bool {
	for _, c := range calls {
		if c.line == line && c.throwaway {
			return true
		}
	}
	return false
}

// readOnly says whether a recorded call only observes the node (or, for
// modprobe, changes only what is global to the kernel), so it belongs in
// the node's own namespace.
func readOnly(line string) bool {
	name, _, _ := strings.Cut(line, " ")
	return strings.HasSuffix(name, "-save") || name == "modprobe" || line == "nft --version"
}

// emptyFilterSave is what legacy-save prints once something (an old
// iptables-legacy -L, say) registered the filter table, without any rules.
const emptyFilterSave = `*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
COMMIT
`

const kubeSave = `*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
COMMIT
`

func TestDetectWithFakes(t *testing.T) {
	redirectMissing := exitErr("iptables-nft -t nat -A KPROXY-PROBE", "iptables v1.8.9 (nf_tables): Couldn't load target `REDIRECT':No such file or directory\n\nTry `iptables -h' or 'iptables --help' for more information.\n")
	nftRestoreRefuses := exitErr("iptables-nft-restore", "iptables-nft-restore v1.8.9 (nf_tables): CHAIN_USER_ADD failed (Operation not supported): chain KPROXY-PROBE\nError occurred at line: 2\n")
	cases := []struct {
		name string
		node *fakeNode
		// legacyProbed: the families whose legacy backend must be probed
		// with table-creating commands; in the others only legacy-save may
		// run.
		legacyProbed []ipfamily.Family
		check        func(t *testing.T, f Features, n *fakeNode)
	}{
		{
			name: "everything present",
			node: &fakeNode{},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if !f.IPVS.Present || !f.IPSet.Present || !f.DummyLinks.Present || !f.SCTP.Present || !f.Conntrack.Present || !f.SKLookup.Present {
					t.Errorf("want all present, got\n%s", f)
				}
				if !ranInThrowaway(n.calls, "bpf sk_lookup probe") {
					t.Errorf("the sk_lookup probe did not run in the throwaway namespace: %v", n.calls)
				}
				if f.Backend != NFT || !f.IPv4.NFT.Redirect || !f.IPv6.NFT.RandomFully {
					t.Errorf("want nft with every target, got\n%s", f)
				}
				if n.genlCalls != 1 {
					t.Errorf("IPVS looked up %d times, want once (no modprobe needed)", n.genlCalls)
				}
				// Every target worked in the one restore that tries them
				// all: no rule command ran, one restore more removed the
				// chains, per family.
				restores := 0
				for _, c := range n.calls {
					if strings.HasPrefix(c.line, "iptables-nft -") || strings.HasPrefix(c.line, "ip6tables-nft -") {
						t.Errorf("target probed on its own although all worked together: %s", c.line)
					}
					if strings.HasPrefix(c.line, "iptables-nft-restore ") || strings.HasPrefix(c.line, "ip6tables-nft-restore ") {
						restores++
					}
				}
				if restores != 4 {
					t.Errorf("%d nft restores, want 4 (probe and removal, per family): %v", restores, n.calls)
				}
			},
		},
		{
			name: "IPv6 disabled in the kernel",
			node: &fakeNode{ipv6Off: errors.New("IPv6 is disabled (net.ipv6.conf.all.disable_ipv6=1)")},
			check: func(t *testing.T, f Features, n *fakeNode) {
				for _, ipt := range []IPTables{f.IPv6.NFT, f.IPv6.Legacy} {
					if ipt.Usable || !strings.Contains(ipt.Problem, "disable_ipv6=1") {
						t.Errorf("IPv6 iptables = %s, want unusable naming the sysctl", ipt)
					}
				}
				if !f.IPv4.NFT.Usable || f.Backend != NFT {
					t.Errorf("IPv4 suffered from IPv6 being off:\n%s", f)
				}
			},
		},
		{
			name: "nft cannot load REDIRECT",
			node: &fakeNode{fail: map[string]error{"iptables-nft -w 5 -t nat -A KPROXY-PROBE -p tcp -d 198.18.0.1 -j REDIRECT": redirectMissing}},
			check: func(t *testing.T, f Features, n *fakeNode) {
				got := f.IPv4.NFT
				if !got.Usable || !got.DNAT || got.Redirect || !got.RandomFully {
					t.Errorf("iptables-nft = %s, want usable with DNAT but no REDIRECT", got)
				}
				if !strings.Contains(got.Problem, "Couldn't load target `REDIRECT'") {
					t.Errorf("problem %q does not quote iptables", got.Problem)
				}
				if !f.IPv6.NFT.Redirect {
					t.Errorf("ip6tables-nft lost REDIRECT:\n%s", f)
				}
				if f.Backend != NFT {
					t.Errorf("backend = %q, want nft: it is usable, REDIRECT is only needed by userspace mode", f.Backend)
				}
			},
		},
		{
			name: "nft binaries missing, legacy only (UML guest)",
			node: &fakeNode{fail: map[string]error{
				"iptables-nft":  missingBinary("iptables-nft"),
				"ip6tables-nft": missingBinary("ip6tables-nft"),
			}},
			legacyProbed: []ipfamily.Family{ipfamily.IPv4, ipfamily.IPv6},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.IPv4.NFT.Usable || f.IPv6.NFT.Usable {
					t.Errorf("nft usable without binaries:\n%s", f)
				}
				if !strings.Contains(f.IPv4.NFT.Problem, "not installed") {
					t.Errorf("nft problem = %q, want it to say not installed", f.IPv4.NFT.Problem)
				}
				if f.Backend != Legacy {
					t.Errorf("backend = %q, want legacy", f.Backend)
				}
				if !f.IPv4.Legacy.Usable || !f.IPv6.Legacy.Usable || !f.IPv4.Legacy.DNAT {
					t.Errorf("legacy not probed usable:\n%s", f)
				}
			},
		},
		{
			// IPv4 decides the backend, so IPv6 legacy is probed too even
			// though ip6tables-nft works: IPv6 rules will go to legacy.
			name:         "nft kernel refuses IPv4 tables: legacy probed in both families",
			node:         &fakeNode{fail: map[string]error{"iptables-nft-restore": nftRestoreRefuses}},
			legacyProbed: []ipfamily.Family{ipfamily.IPv4, ipfamily.IPv6},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.IPv4.NFT.Usable || !strings.Contains(f.IPv4.NFT.Problem, "CHAIN_USER_ADD failed") {
					t.Errorf("iptables-nft = %s, want unusable quoting the restore error", f.IPv4.NFT)
				}
				if f.Backend != Legacy {
					t.Errorf("backend = %q, want legacy", f.Backend)
				}
			},
		},
		{
			// IPv6 legacy shows no tables, but once legacy is chosen its
			// rules go there, so it is probed after the choice.
			name:         "legacy already holds kube rules",
			node:         &fakeNode{saves: map[string]string{"iptables-legacy-save": kubeSave}},
			legacyProbed: []ipfamily.Family{ipfamily.IPv4, ipfamily.IPv6},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.IPv4.Legacy.KubeRules != 2 {
					t.Errorf("legacy kube rules = %d, want 2", f.IPv4.Legacy.KubeRules)
				}
				if f.Backend != Legacy || !strings.Contains(f.BackendReason, "iptables-legacy already holds 2") {
					t.Errorf("backend = %q (%s), want legacy because of its rules", f.Backend, f.BackendReason)
				}
				if !f.Chosen(ipfamily.IPv6).Usable {
					t.Errorf("chosen IPv6 backend = %s, want it probed usable", f.Chosen(ipfamily.IPv6))
				}
			},
		},
		{
			name:         "both hold kube rules, nft more",
			node:         &fakeNode{saves: map[string]string{"iptables-legacy-save": kubeSave, "iptables-nft-save": kubeSave, "ip6tables-nft-save": kubeSave}},
			legacyProbed: []ipfamily.Family{ipfamily.IPv4},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.Backend != NFT {
					t.Errorf("backend = %q (%s), want nft", f.Backend, f.BackendReason)
				}
				if f.IPv4.Legacy.KubeRules != 2 || !f.IPv4.Legacy.Usable {
					t.Errorf("iptables-legacy = %s, want probed usable with 2 kube rules", f.IPv4.Legacy)
				}
			},
		},
		{
			name: "nft usable, no legacy tables: legacy only listed",
			node: &fakeNode{},
			check: func(t *testing.T, f Features, n *fakeNode) {
				for _, fam := range ipfamily.All() {
					got := f.Family(fam).Legacy
					if !got.NotProbed || got.Usable || got.Problem != LegacyNotProbed {
						t.Errorf("%s = %+v, want not probed with Problem %q", Legacy.Command(fam), got, LegacyNotProbed)
					}
					if !ran(n.calls, Legacy.SaveCommand(fam)) {
						t.Errorf("%s not run; it is read-only and finds legacy leftovers", Legacy.SaveCommand(fam))
					}
				}
				if f.Backend != NFT || !strings.Contains(f.String(), "iptables-legacy: "+LegacyNotProbed) {
					t.Errorf("backend = %q, want nft; features:\n%s", f.Backend, f)
				}
			},
		},
		{
			name:         "nft usable, legacy tables present (no kube rules): that family's legacy probed",
			node:         &fakeNode{saves: map[string]string{"ip6tables-legacy-save": emptyFilterSave}},
			legacyProbed: []ipfamily.Family{ipfamily.IPv6},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if got := f.IPv6.Legacy; got.NotProbed || !got.Usable || !got.DNAT {
					t.Errorf("ip6tables-legacy = %s, want probed usable", got)
				}
				if !f.IPv4.Legacy.NotProbed {
					t.Errorf("iptables-legacy = %s, want not probed", f.IPv4.Legacy)
				}
				if f.Backend != NFT {
					t.Errorf("backend = %q (%s), want nft", f.Backend, f.BackendReason)
				}
			},
		},
		{
			name:         "nft unusable for IPv6 only: IPv6 legacy probed",
			node:         &fakeNode{fail: map[string]error{"ip6tables-nft-restore": nftRestoreRefuses}},
			legacyProbed: []ipfamily.Family{ipfamily.IPv6},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.IPv6.NFT.Usable || !f.IPv6.Legacy.Usable {
					t.Errorf("IPv6: nft = %s, legacy = %s; want nft unusable, legacy usable", f.IPv6.NFT, f.IPv6.Legacy)
				}
				if f.Backend != NFT || !f.IPv4.Legacy.NotProbed {
					t.Errorf("backend = %q, iptables-legacy = %s; want nft and legacy not probed", f.Backend, f.IPv4.Legacy)
				}
			},
		},
		{
			name: "legacy not installed, nft usable",
			node: &fakeNode{fail: map[string]error{
				"iptables-legacy":  missingBinary("iptables-legacy"),
				"ip6tables-legacy": missingBinary("ip6tables-legacy"),
			}},
			check: func(t *testing.T, f Features, n *fakeNode) {
				// A failing save is not "not probed": cleanup must not try
				// to read this backend.
				if got := f.IPv4.Legacy; got.NotProbed || got.Usable || !strings.Contains(got.Problem, "not installed") {
					t.Errorf("iptables-legacy = %+v, want unusable because not installed", got)
				}
				if f.Backend != NFT {
					t.Errorf("backend = %q, want nft", f.Backend)
				}
			},
		},
		{
			name: "neither backend usable",
			node: &fakeNode{fail: map[string]error{
				"iptables-nft":            missingBinary("iptables-nft"),
				"iptables-legacy-restore": exitErr("iptables-legacy-restore", "iptables-legacy-restore v1.8.9 (legacy): iptables-legacy-restore: unable to initialize table 'nat'\n"),
			}},
			legacyProbed: []ipfamily.Family{ipfamily.IPv4, ipfamily.IPv6},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.Backend != "" || !strings.Contains(f.BackendReason, "unable to initialize table 'nat'") {
					t.Errorf("backend = %q (%s), want none, quoting legacy's failure", f.Backend, f.BackendReason)
				}
			},
		},
		{
			name: "this CI host: no IPVS, no SCTP, no dummy, no modprobe",
			node: &fakeNode{
				genl:  []error{syscall.ENOENT},
				sctp:  sctpAbsent,
				dummy: syscall.EOPNOTSUPP,
				fail:  map[string]error{"modprobe": missingBinary("modprobe")},
			},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.IPVS.Present || !strings.Contains(f.IPVS.Detail, `no generic netlink family "IPVS"`) {
					t.Errorf("ipvs = %s", f.IPVS)
				}
				if n.genlCalls != 2 {
					t.Errorf("IPVS looked up %d times, want twice (before and after modprobe)", n.genlCalls)
				}
				if f.SCTP.Present || f.DummyLinks.Present {
					t.Errorf("sctp = %s, dummy = %s; want both absent", f.SCTP, f.DummyLinks)
				}
				if !f.IPSet.Present || f.Backend != NFT {
					t.Errorf("ipset = %s, backend = %q", f.IPSet, f.Backend)
				}
			},
		},
		{
			name: "modprobe loads ip_vs",
			node: &fakeNode{genl: []error{syscall.ENOENT}, modprobeLoadsIPVS: true},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if !f.IPVS.Present {
					t.Errorf("ipvs = %s, want present after modprobe", f.IPVS)
				}
			},
		},
		{
			name: "genetlink broken otherwise",
			node: &fakeNode{genl: []error{syscall.EPERM}},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.IPVS.Present || !strings.Contains(f.IPVS.Detail, "operation not permitted") {
					t.Errorf("ipvs = %s, want absent with the errno", f.IPVS)
				}
			},
		},
		{
			name: "sk_lookup refused",
			node: &fakeNode{skLookup: fmt.Errorf("loading the sk_lookup program: %w (needs CAP_BPF and CAP_NET_ADMIN)", syscall.EPERM)},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.SKLookup.Present || !strings.Contains(f.SKLookup.Detail, "CAP_BPF") {
					t.Errorf("sk_lookup = %s, want absent with the probe's reason", f.SKLookup)
				}
				if !strings.Contains(f.String(), "sk_lookup: absent (loading the sk_lookup program") {
					t.Errorf("features do not report sk_lookup:\n%s", f)
				}
			},
		},
		{
			name: "no SCTP: not registered, no module",
			node: &fakeNode{sctp: sctpAbsent},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.SCTP.Present || !strings.Contains(f.SCTP.Detail, "no sctp module") {
					t.Errorf("sctp = %s", f.SCTP)
				}
			},
		},
		{
			name: "SCTP a module not loaded yet",
			node: &fakeNode{sctp: sctpLoadable},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if !f.SCTP.Present || !strings.Contains(f.SCTP.Detail, "not loaded") {
					t.Errorf("sctp = %s, want present, to be loaded by the first SCTP relay", f.SCTP)
				}
			},
		},
		{
			name: "stale probe link is replaced",
			node: &fakeNode{dummyExistsOnce: true},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if !f.DummyLinks.Present {
					t.Errorf("dummy = %s, want present", f.DummyLinks)
				}
			},
		},
		{
			// No CAP_SYS_ADMIN: the probes run in place, still removing
			// what they create, and Detect says where they ran.
			name: "no throwaway namespace: probes run in place and clean up",
			node: &fakeNode{unshareErr: fmt.Errorf("creating a throwaway network namespace: unshare(CLONE_NEWNET): %w", syscall.EPERM)},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if !strings.Contains(f.ProbeNetns.Detail, "node's own network namespace") || !strings.Contains(f.ProbeNetns.Detail, "operation not permitted") {
					t.Errorf("ProbeNetns = %s, want it to say the probes ran in place and why", f.ProbeNetns)
				}
				if !strings.Contains(f.String(), "probes in a throwaway netns: absent (probed in the node's own") {
					t.Errorf("features do not report in-place probing:\n%s", f)
				}
				if f.Backend != NFT || !f.IPv4.NFT.Redirect || !f.IPSet.Present || !f.DummyLinks.Present {
					t.Errorf("in-place probing found less:\n%s", f)
				}
				for _, line := range []string{"netlink ipset destroy " + ProbeIPSet, "iptables-nft-restore -w 5 --noflush", "ip6tables-nft-restore -w 5 --noflush"} {
					if !ran(n.calls, line) {
						t.Errorf("did not run %q; in place the probes must remove what they create", line)
					}
				}
			},
		},
		{
			name: "ipset kernel support missing, conntrack unreachable",
			node: &fakeNode{
				ipset:  syscall.EINVAL,
				ctrack: syscall.EPROTONOSUPPORT,
			},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.IPSet.Present || !strings.Contains(f.IPSet.Detail, "no ip_set support") {
					t.Errorf("ipset = %s", f.IPSet)
				}
				if f.Conntrack.Present || !strings.Contains(f.Conntrack.Detail, "protocol not supported") {
					t.Errorf("conntrack = %s", f.Conntrack)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := (&Detector{Runner: c.node, System: c.node, Sandbox: c.node, ForIPVS: true}).Detect(context.Background())
			c.check(t, f, c.node)
			// Observations in the node's namespace, everything that
			// creates something in the throwaway one when there is one.
			sandboxed := c.node.unshareErr == nil
			if f.ProbeNetns.Present != sandboxed {
				t.Errorf("ProbeNetns = %s, want present=%t", f.ProbeNetns, sandboxed)
			}
			creators := 0
			for _, cl := range c.node.calls {
				if readOnly(cl.line) {
					if cl.throwaway {
						t.Errorf("%q ran in the throwaway namespace; it must observe the node's", cl.line)
					}
					continue
				}
				creators++
				if cl.throwaway != sandboxed {
					t.Errorf("%q ran with throwaway=%t, want %t", cl.line, cl.throwaway, sandboxed)
				}
			}
			if creators == 0 {
				t.Errorf("no probe created anything; calls: %v", c.node.calls)
			}
			for _, fam := range ipfamily.All() {
				want := false
				for _, p := range c.legacyProbed {
					want = want || p == fam
				}
				creators := legacyTableCreators(c.node.calls, fam)
				if want && len(creators) == 0 {
					t.Errorf("%s not probed, want it probed:\n%s", Legacy.Command(fam), f)
				}
				if !want && len(creators) > 0 {
					t.Errorf("ran %q, which create legacy tables, on a node that does not need them", creators)
				}
				if got := f.Family(fam).Legacy; got.NotProbed && (want || got.Usable) {
					t.Errorf("%s = %+v: not probed must mean unused and unusable", Legacy.Command(fam), got)
				}
			}
			// Probes clean up after themselves whatever happened.
			for cmd, left := range c.node.probeChainsRemaining {
				if left {
					t.Errorf("%s: probe chains not removed", cmd)
				}
			}
			if c.node.probeSetExists {
				t.Errorf("probe ipset not destroyed")
			}
			if len(c.node.links) != 0 {
				t.Errorf("probe links left: %v", c.node.links)
			}
		})
	}
}

// TestDetectForAnotherModeLoadsNothing: without ForIPVS no probe asks the
// kernel for what only the IPVS mode needs (a genetlink lookup or modprobe
// of ip_vs, a set, a dummy link), since each would load a module; loaded
// modules still count, for cleanup.
func TestDetectForAnotherModeLoadsNothing(t *testing.T) {
	for _, c := range []struct {
		name                string
		unloaded            map[string]bool
		wantIPVS, wantIPSet bool
		wantGenlCalls       int
	}{
		{name: "modules not loaded", unloaded: map[string]bool{"ip_vs": true, "ip_set": true}},
		{name: "modules loaded by an earlier IPVS mode", wantIPVS: true, wantIPSet: true, wantGenlCalls: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := &fakeNode{unloaded: c.unloaded, genl: []error{syscall.ENOENT}}
			if !c.unloaded["ip_vs"] {
				n.genl = nil
			}
			f := (&Detector{Runner: n, System: n, Sandbox: n}).Detect(context.Background())
			if f.IPVS.Present != c.wantIPVS || f.IPSet.Present != c.wantIPSet || f.DummyLinks.Present {
				t.Errorf("ipvs %s, ipset %s, dummy links %s; want ipvs %t, ipset %t, dummy links not probed",
					f.IPVS, f.IPSet, f.DummyLinks, c.wantIPVS, c.wantIPSet)
			}
			if n.genlCalls != c.wantGenlCalls {
				t.Errorf("IPVS looked up %d times, want %d", n.genlCalls, c.wantGenlCalls)
			}
			for _, cl := range n.calls {
				if strings.HasPrefix(cl.line, "modprobe") || strings.Contains(cl.line, "ipset") || strings.Contains(cl.line, "dummy") {
					t.Errorf("ran %q, which loads a module only the IPVS mode needs", cl.line)
				}
			}
		})
	}
}

func TestCountKubeLines(t *testing.T) {
	save := "# Generated by iptables-save, mentions KUBE- in a comment\n*nat\n:KUBE-SERVICES - [0:0]\n:MINE - [0:0]\n-A OUTPUT -j KUBE-SERVICES\n-A MINE -j KPROXY-X\n-A OUTPUT -j MINE\nCOMMIT\n"
	if got := countKubeLines(save); got != 3 {
		t.Errorf("countKubeLines = %d, want 3", got)
	}
}
