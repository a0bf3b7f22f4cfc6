package lab

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"
)

// BenchmarkNewTopology measures building and removing a dual-stack topology
// with three backends (no servers).
func BenchmarkNewTopology(b *testing.B) {
	if InFreshNetns(b) {
		return
	}
	for b.Loop() {
		topo, err := newTopology(b, TopologyOptions{DualStack: true})
		if topo != nil {
			topo.remove()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDirectUDPEcho is the lab's baseline for UDP request/response:
// 64-byte datagrams from the client to backend-1's plain echo, routed by
// the node, one outstanding at a time.
func BenchmarkDirectUDPEcho(b *testing.B) {
	if InFreshNetns(b) {
		return
	}
	topo := NewTopology(b, TopologyOptions{})
	StartServers(b, topo, ServerOptions{NoIperf: true, LargeFileBytes: 1})
	conn, err := topo.Client.Dial("udp", netip.AddrPortFrom(topo.Backends[0].IPv4, UDPPlainEchoPort).String())
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	msg, buf := make([]byte, 64), make([]byte, 128)
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		if _, err := conn.Write(msg); err != nil {
			b.Fatal(err)
		}
		if n, err := conn.Read(buf); err != nil || n != len(msg) {
			b.Fatalf("echo: %d bytes, %v", n, err)
		}
	}
}

// BenchmarkDirectHTTPKeepAlive is the lab's baseline for keep-alive
// requests: GET / on backend-1's nginx from the client over one connection.
func BenchmarkDirectHTTPKeepAlive(b *testing.B) {
	if InFreshNetns(b) {
		return
	}
	topo := NewTopology(b, TopologyOptions{})
	StartServers(b, topo, ServerOptions{NoIperf: true, LargeFileBytes: 1})
	addr := netip.AddrPortFrom(topo.Backends[0].IPv4, NginxPort).String()
	conn, err := topo.Client.Dial("tcp", addr)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	req := []byte(fmt.Sprintf("GET / HTTP/1.1\r\nHost: %s\r\n\r\n", addr))
	r := bufio.NewReader(conn)
	for b.Loop() {
		if _, err := conn.Write(req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}

// BenchmarkDirectTCPConnect is the lab's baseline for new connections: a
// fresh TCP connection from the client to backend-1's nginx per iteration.
func BenchmarkDirectTCPConnect(b *testing.B) {
	if InFreshNetns(b) {
		return
	}
	topo := NewTopology(b, TopologyOptions{})
	StartServers(b, topo, ServerOptions{NoIperf: true, LargeFileBytes: 1})
	addr := netip.AddrPortFrom(topo.Backends[0].IPv4, NginxPort).String()
	for b.Loop() {
		var conn net.Conn
		err := topo.Client.InNetns(func() (err error) {
			conn, err = net.Dial("tcp", addr)
			return err
		})
		if err != nil {
			b.Fatal(err)
		}
		conn.(*net.TCPConn).SetLinger(0) // no TIME_WAIT pile-up over millions of iterations
		conn.Close()
	}
}
