package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// UDPFlowsOptions shapes a new-UDP-flow run: workers each open a socket from
// a source address and port no other flow of the run used recently, send
// one datagram to Target, wait for its echo and close, over and over.
type UDPFlowsOptions struct {
	Target netip.AddrPort
	// Sources are the client addresses flows come from; with the port range
	// they make the distinct (address, port) pairs a run cycles through, so
	// a pair comes back only after len(Sources)×(PortHi-PortLo+1) flows:
	// long after the node's conntrack entry and the relay's flow for it
	// expired, and every flow is new to the node.
	Sources        []netip.Addr
	PortLo, PortHi int
	Workers        int
	Duration       time.Duration
	Payload        int
	// Timeout is how long a flow waits for its echo before counting as
	// lost.
	Timeout time.Duration
}

// UDPFlowsResult counts a run's flows: answered, lost (no or a wrong
// echo) and skipped (the source pair was still bound: no datagram sent).
type UDPFlowsResult struct {
	Flows, Lost, Skipped int64
	Elapsed              time.Duration
}

// Rate is the answered flows per second.
func (r UDPFlowsResult) Rate() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Flows) / r.Elapsed.Seconds()
}

func (r UDPFlowsResult) String() string {
	return fmt.Sprintf("flows=%d lost=%d skipped=%d elapsed=%s", r.Flows, r.Lost, r.Skipped, r.Elapsed)
}

// ParseUDPFlowsResult reads UDPFlowsResult.String's format.
func ParseUDPFlowsResult(s string) (UDPFlowsResult, error) {
	var r UDPFlowsResult
	seen := map[string]bool{}
	for _, f := range strings.Fields(s) {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			continue
		}
		var err error
		switch k {
		case "flows":
			r.Flows, err = strconv.ParseInt(v, 10, 64)
		case "lost":
			r.Lost, err = strconv.ParseInt(v, 10, 64)
		case "skipped":
			r.Skipped, err = strconv.ParseInt(v, 10, 64)
		case "elapsed":
			r.Elapsed, err = time.ParseDuration(v)
		default:
			continue
		}
		if err != nil {
			return UDPFlowsResult{}, fmt.Errorf("UDP flows result %q: %s: %w", s, k, err)
		}
		seen[k] = true
	}
	for _, k := range []string{"flows", "lost", "skipped", "elapsed"} {
		if !seen[k] {
			return UDPFlowsResult{}, fmt.Errorf("UDP flows result %q lacks %s=", s, k)
		}
	}
	return r, nil
}

// RunUDPFlows runs new UDP flows as opts says until its Duration passes or
// ctx ends.
func RunUDPFlows(ctx context.Context, opts UDPFlowsOptions) (UDPFlowsResult, error) {
	ports := opts.PortHi - opts.PortLo + 1
	if len(opts.Sources) == 0 || ports < opts.Workers || opts.Workers < 1 || opts.Payload < 1 {
		return UDPFlowsResult{}, fmt.Errorf("new UDP flows: want sources, at least one worker and one port per worker, a payload (got %+v)", opts)
	}
	ctx, cancel := context.WithTimeout(ctx, opts.Duration)
	defer cancel()
	var flows, lost, skipped atomic.Int64
	var firstErr error
	var errOnce sync.Once
	start := time.Now()
	var wg sync.WaitGroup
	for w := range opts.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			raddr := net.UDPAddrFromAddrPort(opts.Target)
			msg, buf := make([]byte, opts.Payload), make([]byte, 2048)
			// Worker w takes ports w, w+Workers, …: the pairs of all
			// workers are disjoint, and each walks its own in order.
			mine := (ports - w + opts.Workers - 1) / opts.Workers
			for i := 0; ctx.Err() == nil; i++ {
				k := i % (mine * len(opts.Sources))
				src := opts.Sources[k%len(opts.Sources)]
				port := opts.PortLo + w + (k/len(opts.Sources))*opts.Workers
				laddr := net.UDPAddrFromAddrPort(netip.AddrPortFrom(src, uint16(port)))
				c, err := net.DialUDP("udp", laddr, raddr)
				if err != nil {
					if errors.Is(err, syscall.EADDRINUSE) {
						skipped.Add(1)
						continue
					}
					errOnce.Do(func() { firstErr = err })
					cancel()
					return
				}
				_ = c.SetDeadline(time.Now().Add(opts.Timeout))
				if _, err := c.Write(msg); err != nil {
					lost.Add(1)
				} else if n, err := c.Read(buf); err != nil || n != len(msg) {
					lost.Add(1)
				} else {
					flows.Add(1)
				}
				c.Close()
			}
		}()
	}
	wg.Wait()
	res := UDPFlowsResult{Flows: flows.Load(), Lost: lost.Load(), Skipped: skipped.Load(), Elapsed: time.Since(start)}
	if firstErr != nil {
		return res, fmt.Errorf("new UDP flows to %s: %w", opts.Target, firstErr)
	}
	return res, nil
}
