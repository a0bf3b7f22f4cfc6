package dataplane

import (
	"bytes"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// TestCopyRelay checks the reference relay on loopback in a fresh namespace:
// bytes both ways, the client's half-close reaching the server while the
// reply still flows, and UDP datagrams answered per flow.
func TestCopyRelay(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	// A TCP server that reads to EOF, then answers with what it read,
	// reversed: the answer only comes after the half-close arrived.
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				data, _ := io.ReadAll(c)
				for i, j := 0, len(data)-1; i < j; i, j = i+1, j-1 {
					data[i], data[j] = data[j], data[i]
				}
				_, _ = c.Write(data)
			}()
		}
	}()
	echo := lab.ServeUDPEcho(t, "127.0.0.1:0")

	loopback := netip.MustParseAddrPort("127.0.0.1:0")
	r, err := StartCopyRelay([]RelaySpec{
		{Network: "tcp", Listen: loopback, Upstream: ln.Addr().(*net.TCPAddr).AddrPort()},
		{Network: "udp", Listen: loopback, Upstream: echo},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()

	t.Run("tcp with half-close", func(t *testing.T) {
		c, err := net.Dial("tcp", r.Addrs()[0].String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		msg := bytes.Repeat([]byte("0123456789"), 100000) // 1 MB: more than socket buffers
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		if err := c.(*net.TCPConn).CloseWrite(); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(c)
		if err != nil {
			t.Fatalf("reading the answer after half-close: %v", err)
		}
		if len(got) != len(msg) || got[0] != '9' || got[len(got)-1] != '0' {
			t.Fatalf("answer of %d bytes starting %q, want %d bytes, the request reversed", len(got), got[:min(10, len(got))], len(msg))
		}
	})
	t.Run("udp flows", func(t *testing.T) {
		for _, msg := range []string{"first flow", "second flow"} {
			c, err := net.Dial("udp", r.Addrs()[1].String())
			if err != nil {
				t.Fatal(err)
			}
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			big := bytes.Repeat([]byte(msg), 3000) // > 4096 bytes: passed whole
			if _, err := c.Write(big); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 65536)
			n, err := c.Read(buf)
			c.Close()
			if err != nil || !bytes.Equal(buf[:n], big) {
				t.Fatalf("%s: echo of %d bytes (%v), want the %d bytes sent", msg, n, err, len(big))
			}
		}
	})
	if err := r.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
}
