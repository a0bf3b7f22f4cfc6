package syncscale

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// hintChain is the mangle chain kubelet creates in the backend it uses;
// tools that pick a backend by the rules present (iptables-wrapper, kproxy)
// follow it.
const hintChain = "KUBE-IPTABLES-HINT"

// MarkBackend makes a fresh namespace look like a node whose kubelet uses
// backend b. kproxy takes the backend already holding kube rules, nft when
// neither does; so only legacy needs the mark (and the nftables mode none).
func MarkBackend(ctx context.Context, b kernel.Backend) error {
	if b != kernel.Legacy {
		return nil
	}
	return run(ctx, b.Command(ipfamily.IPv4), "-w", "5", "-t", "mangle", "-N", hintChain)
}

// UnmarkBackend removes MarkBackend's mark, if it is there, so that the
// next kproxy in the namespace picks its backend afresh.
func UnmarkBackend(ctx context.Context, b kernel.Backend) error {
	if b != kernel.Legacy {
		return nil
	}
	ipt := b.Command(ipfamily.IPv4)
	if exec.CommandContext(ctx, ipt, "-w", "5", "-t", "mangle", "-S", hintChain).Run() != nil {
		return nil
	}
	return run(ctx, ipt, "-w", "5", "-t", "mangle", "-X", hintChain)
}

// SaveDump runs backend b's iptables-save for IPv4 (every table it holds;
// naming a table would make the legacy tool instantiate it) and returns
// the output and its summary.
func SaveDump(ctx context.Context, b kernel.Backend) (Dump, string, error) {
	out, err := exec.CommandContext(ctx, b.SaveCommand(ipfamily.IPv4)).Output()
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w%s", b.SaveCommand(ipfamily.IPv4), err, stderrOf(err))
	}
	return ParseSave(string(out)), string(out), nil
}

// ListChain runs `iptables -t nat -S chain` on backend b: a few milliseconds
// on nf_tables whatever the table's size; the legacy tool reads the whole
// table from the kernel. It does not wait for the xtables lock (a restore
// in progress holds it), so a poller retries instead of delaying the proxy.
func ListChain(ctx context.Context, b kernel.Backend, chain string) (string, error) {
	out, err := exec.CommandContext(ctx, b.Command(ipfamily.IPv4), "-t", "nat", "-S", chain).Output()
	if err != nil {
		return "", fmt.Errorf("%s -t nat -S %s: %w%s", b.Command(ipfamily.IPv4), chain, err, stderrOf(err))
	}
	return string(out), nil
}

// VerifyBackend checks that the proxy's rules for n services are in backend
// want and that the other backend holds no proxy rules: both proxies of a
// row must have written to the backend the row is about. It returns want's
// dump.
func VerifyBackend(ctx context.Context, want kernel.Backend, n int) (Dump, error) {
	dump, _, err := SaveDump(ctx, want)
	if err != nil {
		return nil, err
	}
	if got := dump["nat"].ServiceJumps; got < n {
		return nil, fmt.Errorf("iptables-%s-save shows %d KUBE-SERVICES jumps to service chains, want at least %d (one per service)", want, got, n)
	}
	for _, other := range kernel.Backends() {
		if other == want {
			continue
		}
		od, _, err := SaveDump(ctx, other)
		if err != nil {
			return nil, err
		}
		if lines := od.ProxyLines(); lines > 0 {
			return nil, fmt.Errorf("iptables-%s-save shows %d proxy rule lines, but this row's proxies must write to %s only", other, lines, want)
		}
	}
	return dump, nil
}

func run(ctx context.Context, name string, args ...string) error {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w\n%s", name, strings.Join(args, " "), err, out)
	}
	return nil
}

// stderrOf is a failed command's error output, for its error message.
func stderrOf(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return ": " + strings.TrimSpace(string(ee.Stderr))
	}
	return ""
}
