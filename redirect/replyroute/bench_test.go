package replyroute_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/keepsource"
	"kproxy.dev/kproxy/redirect/replyroute"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// BenchmarkConnect times one short TCP exchange with a backend from the
// node (connect, one request, close): from the node's address, and from
// the client's through a transparent socket with its reply rule added and
// removed, with 0 and 1,000 other flows' rules in place (every routed
// packet walks them).
func BenchmarkConnect(b *testing.B) {
	if lab.InFreshNetns(b) {
		return
	}
	topo := lab.NewTopology(b, lab.TopologyOptions{Backends: 1})
	backend, client := topo.Backends[0], topo.Client
	ln, err := backend.Listen("tcp", netip.AddrPortFrom(backend.IPv4, serverPort).String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			fmt.Fprintf(c, "%s\n", c.RemoteAddr())
			c.Close()
		}
	}()
	ep := netip.AddrPortFrom(backend.IPv4, serverPort)
	steer := &replyroute.Netlink{}
	b.Cleanup(steer.Close)
	k := keepsource.New(steer)

	b.Run("from the node", func(b *testing.B) {
		for b.Loop() {
			conn, err := topo.Node.Dial("tcp", ep.String())
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ask(conn); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, others := range []int{0, 1000} {
		b.Run(fmt.Sprintf("from the client, per-flow rules, %d other flows' rules", others), func(b *testing.B) {
			var held []keepsource.Flow
			for i := range others {
				f := keepsource.Flow{Protocol: unix.IPPROTO_TCP, Local: netip.AddrPortFrom(client.IPv4, uint16(20000+i)),
					Endpoint: netip.AddrPortFrom(netip.MustParseAddr("198.19.1.200"), 80)}
				if err := steer.Add(f); err != nil {
					b.Fatal(err)
				}
				held = append(held, f)
			}
			b.Cleanup(func() {
				for _, f := range held {
					_ = steer.Remove(f)
				}
			})
			b.ResetTimer()
			for b.Loop() {
				conn, flow, err := dialKept(k, unix.SOCK_STREAM, unix.IPPROTO_TCP, client.IPv4, ep)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := ask(conn); err != nil {
					b.Fatal(err)
				}
				if err := k.Release(flow); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("from the client, socket match, 1000 other transparent sockets", func(b *testing.B) {
		sm, err := replyroute.NewSocketMatch(context.Background(), ipfamily.IPv4)
		if err != nil {
			b.Fatal(err)
		}
		km := keepsource.New(sm)
		// Other flows' sockets, bound and steered, as a busy relay holds.
		for range 1000 {
			fd, _, err := km.Socket(unix.SOCK_STREAM, unix.IPPROTO_TCP, client.IPv4, netip.MustParseAddrPort("198.19.1.200:80"))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { unix.Close(fd) })
		}
		b.ResetTimer()
		for b.Loop() {
			conn, _, err := dialKept(km, unix.SOCK_STREAM, unix.IPPROTO_TCP, client.IPv4, ep)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := ask(conn); err != nil {
				b.Fatal(err)
			}
		}
	})
}
