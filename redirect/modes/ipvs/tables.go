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

// restoreTables implements Tables with restore.Runner.
type restoreTables struct {
	runner *restore.Runner
}

// NewTables returns the Tables of fam on backend be, running commands
// through exec (nil: the real tools). Tests pass a fakeiptables.Fake.
func NewTables(fam ipfamily.Family, be kernel.Backend, exec kernel.Runner) (Tables, error) {
	r, err := restore.NewRunner(fam, be, exec)
	if err != nil {
		return nil, err
	}
	return &restoreTables{runner: r}, nil
}

func (t *restoreTables) Restore(ctx context.Context, payload []byte) error {
	return t.runner.Restore(ctx, payload)
}

func (t *restoreTables) EnsureJumps(ctx context.Context, jumps []restore.Jump) error {
	_, err := t.runner.EnsureJumps(ctx, jumps)
	return err
}
