package dataplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// RelaySpec is one listener of the reference relay: traffic accepted on
// Listen is relayed to Upstream.
type RelaySpec struct {
	// Network is "tcp" or "udp".
	Network  string
	Listen   netip.AddrPort
	Upstream netip.AddrPort
}

// String renders the spec the way ParseRelaySpec reads it:
// "tcp,0.0.0.0:7001,198.19.1.11:5201".
func (s RelaySpec) String() string {
	return s.Network + "," + s.Listen.String() + "," + s.Upstream.String()
}

// ParseRelaySpec reads "network,listen,upstream".
func ParseRelaySpec(s string) (RelaySpec, error) {
	parts := strings.Split(s, ",")
	if len(parts) != 3 {
		return RelaySpec{}, fmt.Errorf("relay spec %q: want network,listen-addr:port,upstream-addr:port", s)
	}
	spec := RelaySpec{Network: parts[0]}
	if spec.Network != "tcp" && spec.Network != "udp" {
		return RelaySpec{}, fmt.Errorf("relay spec %q: network %q, want tcp or udp", s, spec.Network)
	}
	var err error
	if spec.Listen, err = netip.ParseAddrPort(parts[1]); err != nil {
		return RelaySpec{}, fmt.Errorf("relay spec %q: listen address: %w", s, err)
	}
	if spec.Upstream, err = netip.ParseAddrPort(parts[2]); err != nil {
		return RelaySpec{}, fmt.Errorf("relay spec %q: upstream address: %w", s, err)
	}
	return spec, nil
}

// CopyRelay is the reference every userspace proxy is measured against: what
// a straightforward Go proxy does. TCP: accept, dial the upstream in the
// connection's goroutine, one io.Copy per direction, half-close passed on.
// UDP: one connected upstream socket and reader goroutine per client
// address. No balancing, no pooling, no tuning.
type CopyRelay struct {
	closers []io.Closer
	wg      sync.WaitGroup
	addrs   []net.Addr
}

// udpFlowIdle is how long a UDP flow of the reference relay lives without a
// reply from upstream (kube-proxy's old userspace mode used 250 ms; a
// benchmark's flows are never idle that long, so the exact value is moot).
const udpFlowIdle = 250 * time.Millisecond

// StartCopyRelay opens every listener of specs and relays until Close.
func StartCopyRelay(specs []RelaySpec) (*CopyRelay, error) {
	r := &CopyRelay{}
	for _, s := range specs {
		switch s.Network {
		case "tcp":
			ln, err := net.ListenTCP("tcp", net.TCPAddrFromAddrPort(s.Listen))
			if err != nil {
				r.Close()
				return nil, fmt.Errorf("reference relay %s: %w", s, err)
			}
			r.closers = append(r.closers, ln)
			r.addrs = append(r.addrs, ln.Addr())
			r.wg.Add(1)
			go func() { defer r.wg.Done(); serveTCP(ln, s.Upstream) }()
		case "udp":
			pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(s.Listen))
			if err != nil {
				r.Close()
				return nil, fmt.Errorf("reference relay %s: %w", s, err)
			}
			r.closers = append(r.closers, pc)
			r.addrs = append(r.addrs, pc.LocalAddr())
			r.wg.Add(1)
			go func() { defer r.wg.Done(); serveUDP(pc, s.Upstream) }()
		default:
			r.Close()
			return nil, fmt.Errorf("reference relay %s: unknown network", s)
		}
	}
	return r, nil
}

// Addrs returns the listeners' addresses, in spec order.
func (r *CopyRelay) Addrs() []net.Addr { return r.addrs }

// Close closes the listeners (established TCP connections run to their end)
// and waits for the accept and receive loops to stop.
func (r *CopyRelay) Close() error {
	var errs []error
	for _, c := range r.closers {
		errs = append(errs, c.Close())
	}
	r.wg.Wait()
	return errors.Join(errs...)
}

// Run relays until ctx is done.
func (r *CopyRelay) Run(ctx context.Context) error {
	<-ctx.Done()
	return r.Close()
}

func serveTCP(ln *net.TCPListener, upstream netip.AddrPort) {
	for {
		c, err := ln.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// EMFILE and friends: back off rather than spin.
			klog.ErrorS(err, "Reference relay accept failed")
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go relayTCP(c, upstream)
	}
}

func relayTCP(c *net.TCPConn, upstream netip.AddrPort) {
	defer c.Close()
	u, err := net.DialTCP("tcp", nil, net.TCPAddrFromAddrPort(upstream))
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(u, c)
		_ = u.CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(c, u)
	_ = c.CloseWrite()
	<-done
}

// serveUDP is the naive per-flow UDP relay.
func serveUDP(pc *net.UDPConn, upstream netip.AddrPort) {
	var mu sync.Mutex
	flows := map[netip.AddrPort]*net.UDPConn{}
	buf := make([]byte, 65536)
	for {
		n, client, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				mu.Lock()
				for _, u := range flows {
					u.Close()
				}
				mu.Unlock()
				return
			}
			continue
		}
		mu.Lock()
		u := flows[client]
		if u == nil {
			u, err = net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(upstream))
			if err != nil {
				mu.Unlock()
				continue
			}
			flows[client] = u
			go func() {
				replyUDP(pc, u, client)
				mu.Lock()
				delete(flows, client)
				mu.Unlock()
				u.Close()
			}()
		}
		mu.Unlock()
		_, _ = u.Write(buf[:n])
	}
}

// replyUDP passes a flow's replies back to its client until the flow idles
// out or is closed.
func replyUDP(pc, u *net.UDPConn, client netip.AddrPort) {
	buf := make([]byte, 65536)
	for {
		_ = u.SetReadDeadline(time.Now().Add(udpFlowIdle))
		n, err := u.Read(buf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. ECONNREFUSED from an ICMP error: keep the flow
		}
		if _, err := pc.WriteToUDPAddrPort(buf[:n], client); err != nil && errors.Is(err, net.ErrClosed) {
			return
		}
	}
}
