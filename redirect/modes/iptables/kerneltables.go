package iptables

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes/iptables/rules"
	"kproxy.dev/kproxy/redirect/netfilter/restore"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// kernelTables implements Tables with the backend's iptables tools.
type kernelTables struct {
	fam     ipfamily.Family
	backend kernel.Backend
	exec    kernel.Runner
	runner  *restore.Runner
}

// NewKernelTables returns the Tables of one family on one backend.
func NewKernelTables(fam ipfamily.Family, backend kernel.Backend) (Tables, error) {
	return newTables(fam, backend, kernel.ExecRunner{})
}

// newTables builds Tables on exec; tests pass fakeiptables.
func newTables(fam ipfamily.Family, backend kernel.Backend, exec kernel.Runner) (*kernelTables, error) {
	r, err := restore.NewRunner(fam, backend, exec)
	if err != nil {
		return nil, err
	}
	return &kernelTables{fam: fam, backend: backend, exec: exec, runner: r}, nil
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

// ListChain runs iptables -S CHAIN: cheap on nf_tables whatever the table's
// size; the legacy backend reads the whole table for it.
func (t *kernelTables) ListChain(ctx context.Context, table rules.Table, chain string) ([]string, error) {
	out, err := t.exec.Run(ctx, nil, t.backend.Command(t.fam), "-w", "5", "-t", string(table), "-S", chain)
	if err != nil {
		return nil, fmt.Errorf("listing %s/%s: %w", table, chain, err)
	}
	var lines []string
	for line := range strings.SplitSeq(string(out), "\n") {
		if strings.HasPrefix(line, "-A ") {
			lines = append(lines, line)
		}
	}
	return lines, nil
}
