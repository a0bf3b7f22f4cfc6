package ipvs

import (
	"context"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// Tables is the mode's access to one family's iptables: restores of the
// static layer and the jumps into it from the built-in chains.
type Tables interface {
	// Restore runs one iptables-restore --noflush transaction.
	Restore(ctx context.Context, payload []byte) error
	// EnsureJumps adds the jumps the built-in chains lack.
	EnsureJumps(ctx context.Context, jumps []restore.Jump) error
}

// restoreTables implements Tables with restore.Runner and go-iptables.
type restoreTables struct {
	runner *restore.Runner
	jumps  restore.JumpRules
}

// NewTables returns the Tables of fam on backend be, running commands
// through exec (nil: the real tools) and checking jumps through jr (nil:
// go-iptables on the backend's binary). Tests pass one fakeiptables.Fake as
// both.
func NewTables(fam ipfamily.Family, be kernel.Backend, exec kernel.Runner, jr restore.JumpRules) (Tables, error) {
	r, err := restore.NewRunner(fam, be, exec)
	if err != nil {
		return nil, err
	}
	if jr == nil {
		if jr, err = restore.OpenJumpRules(fam, be); err != nil {
			return nil, err
		}
	}
	return &restoreTables{runner: r, jumps: jr}, nil
}

func (t *restoreTables) Restore(ctx context.Context, payload []byte) error {
	return t.runner.Restore(ctx, payload)
}

func (t *restoreTables) EnsureJumps(_ context.Context, jumps []restore.Jump) error {
	_, err := restore.EnsureJumps(t.jumps, jumps)
	return err
}
