package tcprelay

import (
	"bufio"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// socketFD finds this process's socket connected from local to peer.
func socketFD(t *testing.T, local, peer netip.AddrPort) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err == nil && addrOf(unix.Getsockname(fd)) == local && addrOf(unix.Getpeername(fd)) == peer {
			return fd
		}
	}
	t.Fatalf("no socket of this process is connected from %v to %v", local, peer)
	return -1
}

// watchedEvents returns the events an epoll set of this process watches on
// fd, from the sets' fdinfo ("tfd: <fd> events: <hex> ..."); false when no
// set watches it.
func watchedEvents(t *testing.T, fd int) (uint32, bool) {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if link, _ := os.Readlink("/proc/self/fd/" + e.Name()); link != "anon_inode:[eventpoll]" {
			continue
		}
		f, err := os.Open("/proc/self/fdinfo/" + e.Name())
		if err != nil {
			continue // closed meanwhile
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) >= 4 && fields[0] == "tfd:" && fields[1] == strconv.Itoa(fd) && fields[2] == "events:" {
				ev, err := strconv.ParseUint(fields[3], 16, 32)
				f.Close()
				if err != nil {
					t.Fatalf("fdinfo of an epoll set: %q: %v", sc.Text(), err)
				}
				return uint32(ev), true
			}
		}
		f.Close()
	}
	return 0, false
}

// TestClientWatchedForWritabilityOnceFull: a client's socket is registered
// without EPOLLOUT (it is writable when accepted, so an edge-triggered
// EPOLLOUT would only cost each new connection a turn); the first time its
// send buffer fills, EPOLLOUT is added, and what waited reaches the client
// intact. The socket to the endpoint is watched for EPOLLOUT from the
// start: its connect completes with it.
func TestClientWatchedForWritabilityOnceFull(t *testing.T) {
	const size = 32 << 20
	relayPeer := make(chan netip.AddrPort, 1)
	backend := serve(t, func(c *net.TCPConn) {
		relayPeer <- c.RemoteAddr().(*net.TCPAddr).AddrPort()
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		if _, err := c.Write(b); err != nil { // a small answer first
			return
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return
		}
		_, _ = io.Copy(c, stream(3, size)) // then more than the client takes
		_, _ = io.Copy(io.Discard, c)
	})
	ln, err := net.ListenTCP("tcp4", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	tp := startProxyOn(t, ln, Config{Picker: newPicker(backend), Direct: true})
	c := dial(t, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), tp.port))
	_ = c.SetReadBuffer(64 << 10)
	if _, err := c.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	client, proxyAddr := c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
	clientFD, dialedFD := socketFD(t, proxyAddr, client), socketFD(t, <-relayPeer, backend)
	if ev, ok := watchedEvents(t, dialedFD); !ok || ev&unix.EPOLLOUT == 0 {
		t.Errorf("the socket to the endpoint is watched for %#x (found: %v), want EPOLLOUT among them", ev, ok)
	}
	if ev, ok := watchedEvents(t, clientFD); !ok || ev&unix.EPOLLOUT != 0 || ev&unix.EPOLLIN == 0 {
		t.Errorf("the client's socket, never full, is watched for %#x (found: %v), want EPOLLIN without EPOLLOUT", ev, ok)
	}

	if _, err := c.Write([]byte("b")); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the client's socket to be watched for EPOLLOUT once its send buffer fills", func() bool {
		ev, _ := watchedEvents(t, clientFD)
		return ev&unix.EPOLLOUT != 0
	})
	want, _, _ := digest(stream(3, size))
	got, n, err := digest(io.LimitReader(c, size))
	if err != nil || n != size || string(got) != string(want) {
		t.Fatalf("client read %d bytes (%v), digest match %v; want %d intact bytes", n, err, string(got) == string(want), size)
	}
}
