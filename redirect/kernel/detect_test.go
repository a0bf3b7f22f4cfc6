package kernel

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// fakeNode answers commands and netlink calls the way a real node with the
// configured gaps does, and records what the probes did.
type fakeNode struct {
	// fail maps a substring of a command line to the failure it causes.
	fail map[string]error
	// saves maps a save command to its output.
	saves map[string]string
	// genl errors for successive GenlFamily calls (last one repeats).
	genl                 []error
	dummy, sctp, ctrack  error
	dummyExistsOnce      bool
	calls                []string
	links                map[string]bool
	modprobeLoadsIPVS    bool
	genlCalls            int
	probeChainsRemaining map[string]bool // command → probe chains exist
	probeSetExists       bool
}

func (n *fakeNode) Run(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	line := strings.Join(append([]string{name}, args...), " ")
	n.calls = append(n.calls, line)
	for sub, err := range n.fail {
		if strings.Contains(line, sub) {
			return nil, err
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
	case name == "modprobe":
		if n.modprobeLoadsIPVS {
			n.genl = []error{nil}
		}
	case name == "ipset" && args[0] == "-exist":
		n.probeSetExists = true
	case name == "ipset" && args[0] == "destroy":
		n.probeSetExists = false
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

func (n *fakeNode) AddDummyLink(name string) error {
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

func (n *fakeNode) DeleteLink(name string) error {
	if !n.links[name] {
		return fmt.Errorf("link %s not found", name)
	}
	delete(n.links, name)
	return nil
}

func (n *fakeNode) OpenSocket(domain, typ, proto int) error { return n.sctp }
func (n *fakeNode) ConntrackStats() error {
	if n.ctrack == nil {
		return nil
	}
	return fmt.Errorf("ctnetlink stats request: %w", n.ctrack)
}

// exitErr fails like a tool that ran and complained.
func exitErr(cmd, stderr string) error {
	return &CommandError{Command: cmd, ExitCode: 1, Stderr: stderr, Err: fmt.Errorf("exit status 1")}
}

// missingBinary fails like os/exec does for a binary not on PATH.
func missingBinary(cmd string) error {
	return &CommandError{Command: cmd, ExitCode: -1, Err: &exec.Error{Name: cmd, Err: exec.ErrNotFound}}
}

const kubeSave = `*nat
:PREROUTING ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
-A PREROUTING -m comment --comment "kubernetes service portals" -j KUBE-SERVICES
COMMIT
`

func TestDetectWithFakes(t *testing.T) {
	redirectMissing := exitErr("iptables-nft -t nat -A KPROXY-PROBE", "iptables v1.8.9 (nf_tables): Couldn't load target `REDIRECT':No such file or directory\n\nTry `iptables -h' or 'iptables --help' for more information.\n")
	cases := []struct {
		name  string
		node  *fakeNode
		check func(t *testing.T, f Features, n *fakeNode)
	}{
		{
			name: "everything present",
			node: &fakeNode{},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if !f.IPVS.Present || !f.IPSet.Present || !f.DummyLinks.Present || !f.SCTP.Present || !f.Conntrack.Present {
					t.Errorf("want all present, got\n%s", f)
				}
				if f.Backend != NFT || !f.IPv4.NFT.Redirect || !f.IPv6.Legacy.RandomFully {
					t.Errorf("want nft with every target, got\n%s", f)
				}
				if n.genlCalls != 1 {
					t.Errorf("IPVS looked up %d times, want once (no modprobe needed)", n.genlCalls)
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
				if !f.IPv4.Legacy.Redirect || !f.IPv6.NFT.Redirect {
					t.Errorf("other backends lost REDIRECT:\n%s", f)
				}
			},
		},
		{
			name: "nft binaries missing, legacy only (UML guest)",
			node: &fakeNode{fail: map[string]error{
				"iptables-nft":  missingBinary("iptables-nft"),
				"ip6tables-nft": missingBinary("ip6tables-nft"),
			}},
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
			},
		},
		{
			name: "nft kernel refuses tables",
			node: &fakeNode{fail: map[string]error{
				"iptables-nft-restore": exitErr("iptables-nft-restore", "iptables-nft-restore v1.8.9 (nf_tables): CHAIN_USER_ADD failed (Operation not supported): chain KPROXY-PROBE\nError occurred at line: 2\n"),
			}},
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
			name: "legacy already holds kube rules",
			node: &fakeNode{saves: map[string]string{"iptables-legacy-save": kubeSave}},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.IPv4.Legacy.KubeRules != 2 {
					t.Errorf("legacy kube rules = %d, want 2", f.IPv4.Legacy.KubeRules)
				}
				if f.Backend != Legacy || !strings.Contains(f.BackendReason, "iptables-legacy already holds 2") {
					t.Errorf("backend = %q (%s), want legacy because of its rules", f.Backend, f.BackendReason)
				}
			},
		},
		{
			name: "both hold kube rules, nft more",
			node: &fakeNode{saves: map[string]string{"iptables-legacy-save": kubeSave, "iptables-nft-save": kubeSave, "ip6tables-nft-save": kubeSave}},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.Backend != NFT {
					t.Errorf("backend = %q (%s), want nft", f.Backend, f.BackendReason)
				}
			},
		},
		{
			name: "this CI host: no IPVS, no SCTP, no dummy, no modprobe",
			node: &fakeNode{
				genl:  []error{syscall.ENOENT},
				sctp:  syscall.EPROTONOSUPPORT,
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
			name: "SCTP socket type unsupported",
			node: &fakeNode{sctp: syscall.ESOCKTNOSUPPORT},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.SCTP.Present {
					t.Errorf("sctp = %s", f.SCTP)
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
			name: "ipset kernel support missing, conntrack unreachable",
			node: &fakeNode{
				fail:   map[string]error{"ipset -exist create": exitErr("ipset", "ipset v7.17: Kernel error received: Protocol not supported\n")},
				ctrack: syscall.EPROTONOSUPPORT,
			},
			check: func(t *testing.T, f Features, n *fakeNode) {
				if f.IPSet.Present || !strings.Contains(f.IPSet.Detail, "Kernel error received") {
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
			f := (&Detector{Runner: c.node, System: c.node}).Detect(context.Background())
			c.check(t, f, c.node)
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

func TestCountKubeLines(t *testing.T) {
	save := "# Generated by iptables-save, mentions KUBE- in a comment\n*nat\n:KUBE-SERVICES - [0:0]\n:MINE - [0:0]\n-A OUTPUT -j KUBE-SERVICES\n-A MINE -j KPROXY-X\n-A OUTPUT -j MINE\nCOMMIT\n"
	if got := countKubeLines(save); got != 3 {
		t.Errorf("countKubeLines = %d, want 3", got)
	}
}
