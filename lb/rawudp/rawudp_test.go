package rawudp

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/bench/lab"
	"kproxy.dev/kproxy/lb/eventloop"
)

// referenceChecksum is RFC 768's checksum the plain way: big-endian 16-bit
// words of the pseudo-header and the datagram, summed and folded.
func referenceChecksum(src, dst netip.Addr, dgram []byte) uint16 {
	var b []byte
	s4, d4 := src.As4(), dst.As4()
	b = append(b, s4[:]...)
	b = append(b, d4[:]...)
	b = append(b, 0, unix.IPPROTO_UDP, byte(len(dgram)>>8), byte(len(dgram)))
	b = append(b, dgram...)
	if len(b)%2 == 1 {
		b = append(b, 0)
	}
	var s uint32
	for i := 0; i < len(b); i += 2 {
		s += uint32(binary.BigEndian.Uint16(b[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	c := ^uint16(s)
	if c == 0 {
		c = 0xffff
	}
	return c
}

func TestWriteHeaderIPv4Checksum(t *testing.T) {
	from, to := netip.MustParseAddrPort("198.18.0.20:53"), netip.MustParseAddrPort("198.19.7.9:40000")
	p, err := NewPath(from, to)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1, 2, 7, 8, 9, 23, 31, 32, 33, 63, 64, 65, 1472, 8999, 9000, 65507} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			dgram := make([]byte, HeaderLen+n)
			for _, fill := range []string{"random", "ones"} {
				if fill == "random" {
					_, _ = rand.Read(dgram[HeaderLen:])
				} else {
					for i := range dgram[HeaderLen:] {
						dgram[HeaderLen+i] = 0xff
					}
				}
				p.WriteHeader(dgram)
				if got := binary.BigEndian.Uint16(dgram[0:]); got != 53 {
					t.Errorf("source port %d, want 53", got)
				}
				if got := binary.BigEndian.Uint16(dgram[2:]); got != 40000 {
					t.Errorf("destination port %d, want 40000", got)
				}
				if got := binary.BigEndian.Uint16(dgram[4:]); int(got) != len(dgram) {
					t.Errorf("length %d, want %d", got, len(dgram))
				}
				got := binary.BigEndian.Uint16(dgram[6:])
				dgram[6], dgram[7] = 0, 0
				if want := referenceChecksum(from.Addr(), to.Addr(), dgram); got != want {
					t.Errorf("%s payload: checksum %#04x, want %#04x", fill, got, want)
				}
			}
		})
	}
}

func TestNewPathRejects(t *testing.T) {
	for _, c := range []struct{ from, to string }{
		{"198.18.0.20:53", "[fd00::1]:4000"},
		{"198.18.0.20:0", "198.19.0.1:4000"},
		{"198.18.0.20:53", "198.19.0.1:0"},
	} {
		if _, err := NewPath(netip.MustParseAddrPort(c.from), netip.MustParseAddrPort(c.to)); err == nil {
			t.Errorf("NewPath(%s, %s) accepted", c.from, c.to)
		}
	}
}

// sendOne sends payload along p through s.
func sendOne(t *testing.T, s *Socket, p *Path, payload []byte, corrupt bool) {
	t.Helper()
	dgram := append(make([]byte, HeaderLen), payload...)
	p.WriteHeader(dgram)
	if corrupt {
		dgram[6] ^= 0x5a
	}
	iov := unix.Iovec{Base: &dgram[0]}
	iov.SetLen(len(dgram))
	hdrs := make([]eventloop.Mmsghdr, 1)
	hdrs[0].Hdr.Iov, hdrs[0].Hdr.Iovlen = &iov, 1
	p.Address(&hdrs[0].Hdr)
	if n, err := eventloop.Sendmmsg(s.FD(p), hdrs); err != nil || n != 1 {
		t.Fatalf("sendmmsg: %d, %v", n, err)
	}
}

// TestRepliesComeFromTheChosenAddress sends datagrams from addresses and
// ports no socket holds to clients whose sockets are connected to exactly
// that source, so a datagram with any other source, or a bad checksum, is
// not received (a deliberately corrupted IPv4 checksum shows the receiver
// checks). Loopback's MTU is cut to 1,500 so the large datagrams are
// fragmented by the kernel.
func TestRepliesComeFromTheChosenAddress(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	for _, args := range [][]string{{"link", "set", "lo", "mtu", "1500"}, {"-6", "addr", "add", "fd00:19::2/128", "dev", "lo"}} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	s := openSockets(t)
	for _, c := range []struct {
		name, client, from string
		size               int
	}{
		{"ipv4", "127.0.0.1:0", "127.0.0.2:5353", 64},
		{"ipv4 fragmented", "127.0.0.1:0", "127.0.0.2:5353", 9000},
		{"ipv4 largest", "127.0.0.1:0", "127.0.0.2:5353", 65507},
		{"ipv6", "[::1]:0", "[fd00:19::2]:5353", 64},
		{"ipv6 fragmented", "[::1]:0", "[fd00:19::2]:5353", 9000},
		{"ipv6 largest", "[::1]:0", "[fd00:19::2]:5353", 65527},
	} {
		t.Run(c.name, func(t *testing.T) {
			client, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(c.client)),
				net.UDPAddrFromAddrPort(netip.MustParseAddrPort(c.from)))
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			_ = client.SetReadBuffer(1 << 20)
			p, err := NewPath(netip.MustParseAddrPort(c.from), client.LocalAddr().(*net.UDPAddr).AddrPort())
			if err != nil {
				t.Fatal(err)
			}
			// The kernel fills IPv6 checksums whatever we write.
			bad := []byte("corrupted")
			if !p.v6 {
				sendOne(t, s, &p, bad, true)
			}
			payload := make([]byte, c.size)
			_, _ = rand.Read(payload)
			sendOne(t, s, &p, payload, false)
			_ = client.SetReadDeadline(time.Now().Add(10 * time.Second))
			buf := make([]byte, 70000)
			n, err := client.Read(buf)
			if err != nil {
				t.Fatalf("no datagram from %s: %v", c.from, err)
			}
			if got := buf[:n]; bytes.Equal(got, bad) {
				t.Fatal("a datagram with a bad checksum was delivered: the round trips prove nothing about checksums")
			} else if !bytes.Equal(got, payload) {
				t.Fatalf("received %d bytes, not the %d sent", n, len(payload))
			}
		})
	}
}

// openSockets opens the raw sockets for t and closes them when it ends.
func openSockets(t *testing.T) *Socket {
	t.Helper()
	s, err := Open()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestRawSocketQueuesNothing checks that the raw sockets, which the kernel
// hands every UDP datagram, keep none of them.
func TestRawSocketQueuesNothing(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	openSockets(t)
	exchangeOnLoopback(t, "udp4", "127.0.0.1:0", 100)
	exchangeOnLoopback(t, "udp6", "[::1]:0", 100)
	for _, file := range []string{"/proc/net/raw", "/proc/net/raw6"} {
		queues := rawQueues(t, file)
		if len(queues) != 1 {
			t.Fatalf("%s lists %d raw sockets, want ours alone", file, len(queues))
		}
		if queues[0] != 0 {
			t.Errorf("%s: our raw socket queued %d bytes", file, queues[0])
		}
	}
}

// TestRawSocketIsHandedNoCopies checks that the kernel clones no datagram
// to the raw sockets at all: with their filter detached and a receive buffer
// to queue into, none of the host's UDP datagrams reaches them.
func TestRawSocketIsHandedNoCopies(t *testing.T) {
	if lab.InFreshNetns(t) {
		return
	}
	s := openSockets(t)
	for _, fd := range []int{s.v4, s.v6} {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DETACH_FILTER, 0); err != nil {
			t.Fatalf("detaching the filter: %v", err)
		}
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		network, addr string
		raw           int
	}{{"udp4", "127.0.0.1:0", s.v4}, {"udp6", "[::1]:0", s.v6}} {
		exchangeOnLoopback(t, c.network, c.addr, 100)
		buf := make([]byte, 2048)
		if n, _, err := unix.Recvfrom(c.raw, buf, unix.MSG_DONTWAIT); !errors.Is(err, unix.EAGAIN) {
			t.Errorf("%s: the raw socket was handed a copy of a datagram (%d bytes, %v)", c.network, n, err)
		}
	}
}

// exchangeOnLoopback sends n datagrams to a socket bound to addr and reads
// them, so each went through the host's receive path.
func exchangeOnLoopback(tb testing.TB, network, addr string, n int) {
	tb.Helper()
	sink, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		tb.Fatal(err)
	}
	defer sink.Close()
	c, err := net.DialUDP(network, nil, sink.LocalAddr().(*net.UDPAddr))
	if err != nil {
		tb.Fatal(err)
	}
	defer c.Close()
	out, in := make([]byte, 100), make([]byte, 200)
	for range n {
		if _, err := c.Write(out); err != nil {
			tb.Fatal(err)
		}
		_ = sink.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := sink.Read(in); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkLoopbackDatagramBesideRawSocket is the price every UDP datagram
// on the host pays for the raw reply sockets: one loopback datagram sent and
// read, with no raw socket, with an unbound one (a clone and a filter run
// per datagram) and with Open's (bound where nothing is sent).
func BenchmarkLoopbackDatagramBesideRawSocket(b *testing.B) {
	if lab.InFreshNetns(b) {
		return
	}
	for _, c := range []struct {
		name string
		open func() (*Socket, error)
	}{
		{"none", func() (*Socket, error) { return nil, nil }},
		{"unbound", func() (*Socket, error) { return open(false) }},
		{"bound", Open},
	} {
		b.Run(c.name, func(b *testing.B) {
			s, err := c.open()
			if err != nil {
				b.Fatal(err)
			}
			if s != nil {
				defer s.Close()
			}
			b.ResetTimer()
			exchangeOnLoopback(b, "udp4", "127.0.0.1:0", b.N)
		})
	}
}

// rawQueues reads the receive queue (bytes) of every socket in a
// /proc/net/raw* listing.
func rawQueues(t *testing.T, file string) []int {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var queues []int
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		_, rx, ok := strings.Cut(fields[4], ":") // tx_queue:rx_queue
		if !ok {
			t.Fatalf("%s: unexpected line %q", file, sc.Text())
		}
		n, err := strconv.ParseInt(rx, 16, 64)
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		queues = append(queues, int(n))
	}
	return queues
}

// BenchmarkChecksum measures the IPv4 header and checksum per datagram
// size: the price of not sending a zero checksum.
func BenchmarkChecksum(b *testing.B) {
	p, err := NewPath(netip.MustParseAddrPort("198.18.0.20:53"), netip.MustParseAddrPort("198.19.7.9:40000"))
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{64, 1472, 9000, 65507} {
		b.Run(fmt.Sprintf("%d", n), func(b *testing.B) {
			dgram := make([]byte, HeaderLen+n)
			b.SetBytes(int64(len(dgram)))
			for b.Loop() {
				p.WriteHeader(dgram)
			}
		})
	}
}
