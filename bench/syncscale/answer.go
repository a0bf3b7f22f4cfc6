package syncscale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// Greeting is what the answer server writes to every connection: a client
// that reads it through a ClusterIP has reached the real endpoint.
const Greeting = "syncscale answer\n"

// ServeAnswers listens on port on host h (a lab backend) and writes
// Greeting to every connection, then closes it. Close the listener to stop.
func ServeAnswers(h *lab.Host, port int) (net.Listener, error) {
	ln, err := h.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
	if err != nil {
		return nil, fmt.Errorf("listening for answers on %s port %d: %w", h.Name, port, err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, Greeting)
			_ = c.Close()
		}
	}()
	return ln, nil
}

// PrepareNode makes every probe of a ClusterIP the proxy has not programmed
// yet fail at once, so the probe's retries, not its timeouts, set the
// resolution. Without a DNAT rule a packet to a ClusterIP is routed back
// towards the client; a native nftables table (invisible to both iptables
// backends, so to the proxies and the rule counts) resets such TCP
// connections in the forward hook, which DNATed packets reach with the
// endpoint's address. (An unreachable route would answer with ICMP from
// the routing code, limited to one per second by the host-wide
// net.ipv4.route.error_cost.) And the proxies' own REJECT rules, for a
// service without endpoints yet, answer with ICMP that is not rate-limited.
// The chain runs just before the filter priority: the nftables mode's
// forward chain (at filter priority) drops new connections to service
// addresses it has not allocated yet, which would turn each early probe
// into a dial timeout.
func PrepareNode(node *lab.Host) error {
	cmd := node.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rejectUnprogrammed)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("nft -f - on %s: %w\n%s\ninput:\n%s", node.Name, err, out, rejectUnprogrammed)
	}
	_, err := node.Exec("sysctl", "-q", "-w", "net.ipv4.icmp_ratelimit=0")
	return err
}

// rejectUnprogrammed is the nftables table PrepareNode adds.
const rejectUnprogrammed = `table ip syncscale-lab {
	chain forward {
		type filter hook forward priority filter - 5; policy accept;
		ip daddr ` + lab.ServiceCIDR + ` meta l4proto tcp reject with tcp reset
		ip daddr ` + lab.ServiceCIDR + ` reject with icmp type host-unreachable
	}
}
`

// Probe timings: a dial that the node refuses (see PrepareNode) fails at
// once; one whose SYN is lost waits dialTimeout. Between attempts the
// prober pauses retryPause.
const (
	dialTimeout = 100 * time.Millisecond
	readTimeout = 2 * time.Second
	retryPause  = 5 * time.Millisecond
)

// ErrWrongAnswer is returned when something other than the answer server
// answered: rules pointing somewhere else.
var ErrWrongAnswer = errors.New("wrong answer")

// Ask connects from h to addr and reads the whole answer.
func Ask(ctx context.Context, h *lab.Host, addr netip.AddrPort) error {
	dctx, cancel := context.WithTimeout(ctx, dialTimeout)
	defer cancel()
	conn, err := h.DialContext(dctx, "tcp4", addr.String())
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(readTimeout))
	got, err := io.ReadAll(conn)
	if err != nil {
		return fmt.Errorf("reading the answer from %s: %w", addr, err)
	}
	if string(got) != Greeting {
		return fmt.Errorf("%w from %s: %q, want %q", ErrWrongAnswer, addr, got, Greeting)
	}
	return nil
}

// WaitAnswer asks addr from h until the answer server answers, and returns
// when it did. A wrong answer ends the wait at once; no answer by deadline
// is an error carrying the last failure.
func WaitAnswer(ctx context.Context, h *lab.Host, addr netip.AddrPort, deadline time.Time) (time.Time, error) {
	var last error
	for attempts := 1; ; attempts++ {
		err := Ask(ctx, h, addr)
		if err == nil {
			return time.Now(), nil
		}
		if errors.Is(err, ErrWrongAnswer) {
			return time.Time{}, err
		}
		last = err
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s never answered from %s: %d attempts, the last: %w", addr, h.Name, attempts, last)
		}
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("waiting for %s to answer: %w", addr, ctx.Err())
		case <-time.After(retryPause):
		}
	}
}
