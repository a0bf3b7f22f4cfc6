package load

import (
	"context"
	"errors"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/guest"
	"kproxy.dev/kproxy/bench/lab"
)

// runLength is each workload's run in the kernel tests.
const runLength = time.Second

// TestWorkloadsInTheLab runs every workload from the lab's client to its
// backend's servers, then at addresses where nothing answers, then stops
// runs by their context.
func TestWorkloadsInTheLab(t *testing.T) {
	lab.RequireRoot(t)
	if lab.InFreshNetns(t) {
		return
	}
	topo := lab.NewTopology(t, lab.TopologyOptions{Backends: 1})
	lab.StartServers(t, topo, lab.ServerOptions{NoIperf: true, LargeFileBytes: 1})
	if err := PrepareHosts(topo); err != nil {
		t.Fatal(err)
	}
	// Twice: a harness may prepare a lab it reuses.
	if err := PrepareHosts(topo); err != nil {
		t.Fatalf("preparing the hosts again: %v", err)
	}
	for _, h := range []*lab.Host{topo.Node, topo.Client, topo.Backends[0]} {
		if got := strings.TrimSpace(h.MustExec("sysctl", "-n", "net.ipv4.tcp_max_tw_buckets")); got != "1024" {
			t.Errorf("%s: tcp_max_tw_buckets %s, want 1024", h, got)
		}
	}
	if has, err := hasConntrack(topo.Node); err != nil {
		t.Error(err)
	} else if !has {
		t.Log("no conntrack module loaded: the node's conntrack timeouts are not checked")
	} else if got := strings.TrimSpace(topo.Node.MustExec("sysctl", "-n", "net.netfilter.nf_conntrack_udp_timeout")); got != "2" {
		t.Errorf("node: nf_conntrack_udp_timeout %s, want 2", got)
	}
	if addrs := topo.Client.MustExec("ip", "-4", "-o", "addr", "show", "dev", "eth0"); !strings.Contains(addrs, " 198.19.0.107/24 ") {
		t.Errorf("the client's eth0 lacks the UDP flow sources:\n%s", addrs)
	}
	backend := topo.Backends[0].IPv4
	direct := Target{Client: topo.Client,
		HTTP: netip.AddrPortFrom(backend, lab.NginxPort), UDP: netip.AddrPortFrom(backend, lab.UDPPlainEchoPort)}

	t.Run("answered", func(t *testing.T) {
		for _, w := range Workloads() {
			t.Run(w, func(t *testing.T) {
				res, err := Run(context.Background(), w, direct, runLength)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%s: %.0f/s, p50 %v, p99 %v, %d ops, %d errors, %v busy CPU in %v, %v per op",
					w, res.Rate, res.P50, res.P99, res.Ops, res.Errors, res.BusyCPU, res.Elapsed, res.CPUPerOp())
				if res.Rate <= 0 || res.Ops <= 0 || res.CPUPerOp() <= 0 || res.Elapsed < runLength/2 {
					t.Errorf("%s: %+v, want a rate, ops, CPU per op and about %v elapsed", w, res, runLength)
				}
				// The new-UDP-flow client reports no latencies.
				timed := w != UDPFlows
				if timed && (res.P50 <= 0 || res.P99 < res.P50) {
					t.Errorf("%s: p50 %v, p99 %v, want 0 < p50 <= p99", w, res.P50, res.P99)
				}
				if !timed && (res.P50 != 0 || res.P99 != 0) {
					t.Errorf("%s: p50 %v, p99 %v, want none", w, res.P50, res.P99)
				}
			})
		}
	})

	nowhere := []struct {
		name string
		t    Target
	}{
		// Nothing listens on these backend ports: refused at once.
		{"refused", Target{Client: topo.Client,
			HTTP: netip.AddrPortFrom(backend, lab.NginxPort+1), UDP: netip.AddrPortFrom(backend, lab.UDPPlainEchoPort+100)}},
		// No rule on the node takes this VIP: packets loop between client
		// and node until their TTL runs out.
		{"unrouted VIP", Target{Client: topo.Client,
			HTTP: netip.MustParseAddrPort("198.18.99.1:8080"), UDP: netip.MustParseAddrPort("198.18.99.1:9001")}},
	}
	for _, n := range nowhere {
		t.Run(n.name, func(t *testing.T) {
			for _, w := range Workloads() {
				t.Run(w, func(t *testing.T) {
					start := time.Now()
					res, err := Run(context.Background(), w, n.t, runLength)
					took := time.Since(start)
					if err == nil {
						t.Fatalf("%s at %+v: no error, result %+v", w, n.t, res)
					}
					if !strings.HasPrefix(err.Error(), w+" to ") {
						t.Errorf("error %q does not start with the workload %q and its target", err, w)
					}
					if limit := runLength + max(guest.Scale(wrkGrace), flowGrace) + 5*time.Second; took > limit {
						t.Errorf("%s took %v to fail, want about its run of %v", w, took, runLength)
					}
					t.Logf("%s after %v: %v", w, took.Round(time.Millisecond), err)
				})
			}
		})
	}

	// wrk opens one connection before its run and waits for it: each lost
	// SYN costs it a retransmission timeout before the run starts (1 s
	// each for the first ones on kernels with tcp_syn_linear_timeouts,
	// 1 s, 2 s, 4 s on older ones such as the guest's). A run shorter than
	// wrk's one second whose first three SYNs were lost must still be
	// measured, not killed as unanswered.
	t.Run("first SYNs lost", func(t *testing.T) {
		// Each rule drops the first SYN that reaches it: the first rule
		// the first, the second rule the next, and so on.
		rule := []string{"FORWARD", "-d", backend.String(), "-p", "tcp", "--dport", strconv.Itoa(lab.NginxPort), "--syn",
			"-m", "statistic", "--mode", "nth", "--every", "1000000", "--packet", "0", "-j", "DROP"}
		const lost = 3
		for range lost {
			topo.Node.MustExec("iptables", append([]string{"-w", "-A"}, rule...)...)
		}
		defer func() {
			for range lost {
				topo.Node.MustExec("iptables", append([]string{"-w", "-D"}, rule...)...)
			}
		}()
		res, err := Run(context.Background(), NewConn, direct, 300*time.Millisecond)
		if err != nil {
			t.Fatalf("a new-connection run whose first %d SYNs were lost: %v", lost, err)
		}
		t.Logf("%s with its first %d SYNs lost: %d requests, %v elapsed", NewConn, lost, res.Ops, res.Elapsed.Round(time.Millisecond))
		counts := topo.Node.MustExec("iptables", "-w", "-L", "FORWARD", "-v", "-x", "-n")
		if got := len(regexp.MustCompile(`(?m)^\s*1\s+\d+\s+DROP\b`).FindAllString(counts, -1)); got != lost {
			t.Errorf("%d rules dropped one SYN each, want %d:\n%s", got, lost, counts)
		}
	})

	t.Run("cancelled", func(t *testing.T) {
		for _, w := range Workloads() {
			t.Run(w, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
				defer cancel()
				start := time.Now()
				_, err := Run(ctx, w, direct, time.Minute)
				took := time.Since(start)
				if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), w+" to ") {
					t.Errorf("%s cancelled: error %v, want one naming it and wrapping the context's", w, err)
				}
				// Well short of the minute asked for: the context stopped it.
				if took > 30*time.Second {
					t.Errorf("%s took %v to stop after its context ended at 300ms", w, took)
				}
			})
		}
	})
}
