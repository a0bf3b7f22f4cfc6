package restore

import (
	"fmt"
	"os/exec"
	"slices"

	"github.com/coreos/go-iptables/iptables"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// JumpRules is the part of go-iptables EnsureJumps needs; *iptables.IPTables
// implements it, and so does fakeiptables.Fake.
type JumpRules interface {
	Exists(table, chain string, rulespec ...string) (bool, error)
	Insert(table, chain string, pos int, rulespec ...string) error
	Append(table, chain string, rulespec ...string) error
}

var _ JumpRules = (*iptables.IPTables)(nil)

// Jump is one rule in a built-in chain that enters one of a mode's chains.
// Such rules live in chains other software also writes to, so they are
// checked and added one by one rather than rewritten by a restore.
type Jump struct {
	Table, Chain string
	// First: inserted at the top of Chain; otherwise appended.
	First bool
	// Args is the rule as iptables-save prints it after "-A Chain", split
	// into words (a comment is one word, unquoted).
	Args []string
}

// Target is the chain the rule jumps or goes to (see JumpTarget), or its
// last word when it names none.
func (j Jump) Target() string {
	if t := JumpTarget(j.Args); t != "" || len(j.Args) == 0 {
		return t
	}
	return j.Args[len(j.Args)-1]
}

// EnsureJumps adds, in order, each jump of jumps that jr does not have, and
// returns the ones it added. A First jump is inserted at position 1, so of
// several First jumps into one chain the last listed ends up on top. On an
// error it returns the jumps added so far with an error naming the table,
// chain and target that failed.
func EnsureJumps(jr JumpRules, jumps []Jump) ([]Jump, error) {
	var added []Jump
	for _, j := range jumps {
		ok, err := jr.Exists(j.Table, j.Chain, j.Args...)
		if err != nil {
			return added, fmt.Errorf("checking the jump to %s in %s/%s: %w", j.Target(), j.Table, j.Chain, err)
		}
		if ok {
			continue
		}
		if j.First {
			err = jr.Insert(j.Table, j.Chain, 1, j.Args...)
		} else {
			err = jr.Append(j.Table, j.Chain, j.Args...)
		}
		if err != nil {
			return added, fmt.Errorf("adding the jump to %s in %s/%s: %w", j.Target(), j.Table, j.Chain, err)
		}
		added = append(added, Jump{Table: j.Table, Chain: j.Chain, First: j.First, Args: slices.Clone(j.Args)})
	}
	return added, nil
}

// OpenJumpRules opens go-iptables on the iptables binary of backend be for
// fam, waiting up to 5 seconds for the xtables lock like the Runner does.
func OpenJumpRules(fam ipfamily.Family, be kernel.Backend) (JumpRules, error) {
	if err := checkFamilyBackend(fam, be); err != nil {
		return nil, err
	}
	path, err := exec.LookPath(be.Command(fam))
	if err != nil {
		return nil, fmt.Errorf("opening go-iptables: %w", err)
	}
	proto := iptables.ProtocolIPv4
	if fam == ipfamily.IPv6 {
		proto = iptables.ProtocolIPv6
	}
	ipt, err := iptables.New(iptables.Path(path), iptables.IPFamily(proto), iptables.Timeout(lockWaitSeconds))
	if err != nil {
		return nil, fmt.Errorf("opening go-iptables on %s: %w", path, err)
	}
	return ipt, nil
}

func checkFamilyBackend(fam ipfamily.Family, be kernel.Backend) error {
	if fam != ipfamily.IPv4 && fam != ipfamily.IPv6 {
		return fmt.Errorf("unknown IP family %q", fam)
	}
	if be != kernel.NFT && be != kernel.Legacy {
		return fmt.Errorf("unknown iptables backend %q", be)
	}
	return nil
}
