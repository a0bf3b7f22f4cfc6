package iptables

import (
	"context"
	"errors"
	"fmt"

	"kproxy.dev/kproxy/redirect/iptables/rules"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/restore"
)

// kernelTables implements Tables with the backend's iptables tools.
type kernelTables struct {
	fam     kernel.Family
	backend kernel.Backend
	exec    kernel.Runner
	runner  *restore.Runner
	jumps   restore.JumpRules
}

// NewKernelTables returns the Tables of one family on one backend.
func NewKernelTables(fam kernel.Family, backend kernel.Backend) (Tables, error) {
	return newTables(fam, backend, kernel.ExecRunner{}, nil)
}

// newTables builds Tables on exec and jr (nil: go-iptables on the backend's
// binary); tests pass fakeiptables for both.
func newTables(fam kernel.Family, backend kernel.Backend, exec kernel.Runner, jr restore.JumpRules) (*kernelTables, error) {
	r, err := restore.NewRunner(fam, backend, exec)
	if err != nil {
		return nil, err
	}
	if jr == nil {
		if jr, err = restore.OpenJumpRules(fam, backend); err != nil {
			return nil, err
		}
	}
	return &kernelTables{fam: fam, backend: backend, exec: exec, runner: r, jumps: jr}, nil
}

func (t *kernelTables) Restore(ctx context.Context, payload []byte) error {
	return t.runner.Restore(ctx, payload)
}

func (t *kernelTables) Save(ctx context.Context, table rules.Table) (string, error) {
	return t.runner.Save(ctx, string(table))
}

// ChainExists lists just that chain (-S CHAIN), which stays a few
// milliseconds however large the table is.
func (t *kernelTables) ChainExists(ctx context.Context, table rules.Table, chain string) (bool, error) {
	_, err := t.exec.Run(ctx, nil, t.backend.Command(t.fam), "-w", "5", "-t", string(table), "-S", chain)
	if err == nil {
		return true, nil
	}
	var ce *kernel.CommandError
	if errors.As(err, &ce) && ce.ExitCode > 0 {
		return false, nil
	}
	return false, fmt.Errorf("listing %s/%s: %w", table, chain, err)
}

func (t *kernelTables) EnsureJumps(ctx context.Context, jumps []rules.Jump) error {
	rj := make([]restore.Jump, len(jumps))
	for i, j := range jumps {
		rj[i] = restore.Jump{Table: string(j.Table), Chain: j.Chain, First: j.First, Args: j.Args}
	}
	_, err := restore.EnsureJumps(t.jumps, rj)
	return err
}
