package restore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// lockWaitSeconds is how long a restore or a go-iptables call waits for the
// xtables lock another writer (kubelet, a CNI plugin) holds. Both backends'
// restore tools of iptables 1.8.9 accept --wait=N (legacy takes the lock;
// nft ignores it, having no lock).
const lockWaitSeconds = 5

// Runner runs iptables-restore and iptables-save of one backend for one IP
// family through a kernel.Runner.
type Runner struct {
	fam     ipfamily.Family
	backend kernel.Backend
	exec    kernel.Runner
}

// NewRunner returns a Runner for fam and be; a nil exec means
// kernel.ExecRunner.
func NewRunner(fam ipfamily.Family, be kernel.Backend, exec kernel.Runner) (*Runner, error) {
	if err := checkFamilyBackend(fam, be); err != nil {
		return nil, fmt.Errorf("restore runner: %w", err)
	}
	if exec == nil {
		exec = kernel.ExecRunner{}
	}
	return &Runner{fam: fam, backend: be, exec: exec}, nil
}

// Family is the IP family the Runner writes.
func (r *Runner) Family() ipfamily.Family { return r.fam }

// Backend is the iptables backend the Runner writes.
func (r *Runner) Backend() kernel.Backend { return r.backend }

// Restore feeds payload to iptables-restore --noflush: only the chains the
// payload declares or names change. When the tool fails, the error is an
// *Error naming the payload line at fault and keeping the tool's stderr;
// tables whose COMMIT came before that line have been written (both
// backends commit table by table), the failing table and those after it
// are unchanged.
func (r *Runner) Restore(ctx context.Context, payload []byte) error {
	cmd := r.backend.RestoreCommand(r.fam)
	_, err := r.exec.Run(ctx, payload, cmd, "--noflush", "--wait="+strconv.Itoa(lockWaitSeconds))
	if err == nil {
		return nil
	}
	stderr := ""
	var ce *kernel.CommandError
	if errors.As(err, &ce) {
		stderr = ce.Stderr
	}
	return newError(cmd, payload, stderr, err)
}

// Save returns iptables-save's dump of one table.
func (r *Runner) Save(ctx context.Context, table string) (string, error) {
	cmd := r.backend.SaveCommand(r.fam)
	out, err := r.exec.Run(ctx, nil, cmd, "-t", table)
	if err != nil {
		return "", fmt.Errorf("reading the %s table of %s: %w", table, r.fam, err)
	}
	return string(out), nil
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
