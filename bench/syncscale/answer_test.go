package syncscale

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// TestWaitAnswer runs the network-programming probe against a hand-written
// DNAT rule that appears while it waits, one that leads to the wrong
// server, and none at all.
func TestWaitAnswer(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	topo := lab.NewTopology(t, lab.TopologyOptions{Backends: 1})
	server := topo.Backends[0]
	ln, err := ServeAnswers(server, EndpointPort)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	other, err := server.Listen("tcp4", "0.0.0.0:8081")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Close() })
	go func() {
		for {
			c, err := other.Accept()
			if err != nil {
				return
			}
			fmt.Fprint(c, "someone else\n")
			c.Close()
		}
	}()
	if err := PrepareNode(topo.Node); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dnat := func(vip netip.Addr, port int) {
		lab.Run(t, "iptables", "-t", "nat", "-A", "PREROUTING", "-d", vip.String(), "-p", "tcp", "--dport", "80",
			"-j", "DNAT", "--to-destination", netip.AddrPortFrom(server.IPv4, uint16(port)).String())
	}

	t.Run("rule appears while waiting", func(t *testing.T) {
		vip := NPLServiceIP(0)
		const delay = 400 * time.Millisecond
		start := time.Now()
		time.AfterFunc(delay, func() { dnat(vip, EndpointPort) })
		at, err := WaitAnswer(ctx, topo.Client, netip.AddrPortFrom(vip, ServicePort), start.Add(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		// The node refuses at once until the rule is there, so the answer
		// comes promptly after it.
		if took := at.Sub(start); took < delay || took > delay+time.Second {
			t.Errorf("answered after %v, want just over %v", took, delay)
		}
	})
	t.Run("wrong server", func(t *testing.T) {
		vip := NPLServiceIP(1)
		dnat(vip, 8081)
		_, err := WaitAnswer(ctx, topo.Client, netip.AddrPortFrom(vip, ServicePort), time.Now().Add(10*time.Second))
		if !errors.Is(err, ErrWrongAnswer) {
			t.Errorf("WaitAnswer through a rule to the wrong server = %v, want ErrWrongAnswer", err)
		}
	})
	t.Run("refused at once, every time", func(t *testing.T) {
		// More attempts than any ICMP rate limit's burst.
		for i := range 30 {
			start := time.Now()
			err := Ask(ctx, topo.Client, netip.AddrPortFrom(NPLServiceIP(3), ServicePort))
			if !errors.Is(err, syscall.ECONNREFUSED) {
				t.Fatalf("attempt %d to a ClusterIP without rules: %v, want connection refused", i+1, err)
			}
			if took := time.Since(start); took >= dialTimeout {
				t.Fatalf("attempt %d took %v: refused only by the dial timeout", i+1, took)
			}
		}
	})
	t.Run("no rule", func(t *testing.T) {
		vip := NPLServiceIP(2)
		start := time.Now()
		_, err := WaitAnswer(ctx, topo.Client, netip.AddrPortFrom(vip, ServicePort), start.Add(500*time.Millisecond))
		if err == nil || !strings.Contains(err.Error(), "never answered") {
			t.Fatalf("WaitAnswer without a rule = %v, want never answered", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("giving up took %v, want about the 500ms deadline", took)
		}
	})
}
