package sklookup_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// sockOpts are the options a test socket is bound with.
type sockOpts struct {
	reuse    bool // SO_REUSEADDR and SO_REUSEPORT, so squatters can share a port
	freebind bool // IP_FREEBIND / IPV6_FREEBIND, as a squatter binds an address early
	// replyReuse: SO_REUSEADDR only, so a reply socket shares a port with
	// the squatters without joining their SO_REUSEPORT group.
	replyReuse bool
	origDst    bool // IP(V6)_RECVORIGDSTADDR on a UDP socket
	// replyFromOrigDst: a UDP server echoes each datagram from the original
	// destination address and port, as a relay behind a shared socket must
	// answer; see replyFrom.
	replyFromOrigDst bool
}

func (o sockOpts) control(_, _ string, c syscall.RawConn) error {
	var err error
	cerr := c.Control(func(fd uintptr) {
		set := func(level, opt int) {
			if err == nil {
				err = unix.SetsockoptInt(int(fd), level, opt, 1)
			}
		}
		domain, derr := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN)
		if derr != nil {
			err = derr
			return
		}
		v6 := domain == unix.AF_INET6
		if o.reuse || o.replyReuse {
			set(unix.SOL_SOCKET, unix.SO_REUSEADDR)
		}
		if o.reuse {
			set(unix.SOL_SOCKET, unix.SO_REUSEPORT)
		}
		switch {
		case o.freebind && v6:
			set(unix.SOL_IPV6, unix.IPV6_FREEBIND)
		case o.freebind:
			set(unix.SOL_IP, unix.IP_FREEBIND)
		}
		switch {
		case o.origDst && v6:
			set(unix.SOL_IPV6, unix.IPV6_RECVORIGDSTADDR)
		case o.origDst:
			set(unix.SOL_IP, unix.IP_RECVORIGDSTADDR)
		}
	})
	return errors.Join(cerr, err)
}

// arrival is one connection or datagram a test server received.
type arrival struct {
	server  string
	payload string
	local   netip.AddrPort // accepted connection's local address, or datagram's original destination
	// replyErr: a UDP server's echo failed.
	replyErr error
}

// servers are the test's TCP listeners and UDP sockets; each reports what it
// receives on one channel.
type servers struct {
	t        *testing.T
	arrivals chan arrival
	mu       sync.Mutex
	count    map[string]int
}

func newServers(t *testing.T) *servers {
	return &servers{t: t, arrivals: make(chan arrival, 256), count: map[string]int{}}
}

// record counts an arrival; datagrams also go on the arrivals channel (a
// TCP client reads the server's name from the connection instead).
func (s *servers) record(a arrival, datagram bool) {
	s.mu.Lock()
	s.count[a.server]++
	s.mu.Unlock()
	if datagram {
		s.arrivals <- a
	}
}

// received is how many connections or datagrams server got so far.
func (s *servers) received(server string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.count[server]
}

// listenTCP starts a plain-TCP (not MPTCP) listener that tells each client
// its name and the connection's local address.
func (s *servers) listenTCP(name, network, addr string, o sockOpts) *net.TCPListener {
	s.t.Helper()
	lc := net.ListenConfig{Control: o.control}
	lc.SetMultipathTCP(false)
	l, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		s.t.Fatalf("listening %s %s for %s: %v", network, addr, name, err)
	}
	s.t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			local := c.LocalAddr().(*net.TCPAddr).AddrPort()
			s.record(arrival{server: name, local: local}, false)
			fmt.Fprintf(c, "%s %s\n", name, local)
			c.Close()
		}
	}()
	return l.(*net.TCPListener)
}

// listenUDP starts an unconnected UDP socket that records each datagram with
// its original destination.
func (s *servers) listenUDP(name, network, addr string, o sockOpts) *net.UDPConn {
	s.t.Helper()
	o.origDst = true
	lc := net.ListenConfig{Control: o.control}
	pc, err := lc.ListenPacket(context.Background(), network, addr)
	if err != nil {
		s.t.Fatalf("listening %s %s for %s: %v", network, addr, name, err)
	}
	conn := pc.(*net.UDPConn)
	s.t.Cleanup(func() { conn.Close() })
	go func() {
		buf, oob := make([]byte, 1500), make([]byte, 512)
		for {
			n, oobn, _, from, err := conn.ReadMsgUDPAddrPort(buf, oob)
			if err != nil {
				return
			}
			a := arrival{server: name, payload: string(buf[:n]), local: origDst(oob[:oobn])}
			if o.replyFromOrigDst && a.local.IsValid() {
				a.replyErr = replyFrom(a.local, from, buf[:n])
			}
			s.record(a, true)
		}
	}()
	return conn
}

// replyFrom sends payload to a client from src, the service address and
// port the client sent to. The shared socket cannot: IP_PKTINFO sets a
// datagram's source address but not its port, and the socket's own port is
// not the service's. A socket bound to src (SO_REUSEADDR beside the
// squatters, FREEBIND because IPv6 takes only assigned addresses, not local
// routes, as bind or source addresses) and connected to the client can;
// while open, the kernel also hands it that client's next datagrams before
// the program runs.
func replyFrom(src, client netip.AddrPort, payload []byte) error {
	d := net.Dialer{LocalAddr: net.UDPAddrFromAddrPort(src), Control: sockOpts{replyReuse: true, freebind: true}.control}
	c, err := d.Dial("udp", client.String())
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write(payload)
	return err
}

// origDst reads IP_ORIGDSTADDR or IPV6_ORIGDSTADDR from control messages.
func origDst(oob []byte) netip.AddrPort {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return netip.AddrPort{}
	}
	for _, m := range msgs {
		switch {
		case m.Header.Level == unix.SOL_IP && m.Header.Type == unix.IP_ORIGDSTADDR && len(m.Data) >= unix.SizeofSockaddrInet4:
			var ip [4]byte
			copy(ip[:], m.Data[4:8])
			return netip.AddrPortFrom(netip.AddrFrom4(ip), uint16(m.Data[2])<<8|uint16(m.Data[3]))
		case m.Header.Level == unix.SOL_IPV6 && m.Header.Type == unix.IPV6_ORIGDSTADDR && len(m.Data) >= unix.SizeofSockaddrInet6:
			var ip [16]byte
			copy(ip[:], m.Data[8:24])
			return netip.AddrPortFrom(netip.AddrFrom16(ip), uint16(m.Data[2])<<8|uint16(m.Data[3]))
		}
	}
	return netip.AddrPort{}
}

// outcome is where a client's connection or datagram should end up.
type outcome string

const (
	ours     outcome = "ours"     // the socket in the target's slot, with the service address as local address
	node     outcome = "node"     // the node's own listener on port 2222
	squatter outcome = "squatter" // one of the squatters: the kernel's own lookup chose
	// discarding: the socket in the target's discarding slot, with the
	// service address as local address.
	discarding outcome = "discarding"
	// nodeOnly: the socket in the target's node-only slot, with the
	// service address as local address.
	nodeOnly outcome = "node-only"
	// refused: the program dropped the lookup, and the kernel answered as
	// for a closed port (TCP reset, ICMP port unreachable).
	refused outcome = "refused"
)

// arrivalTimeout bounds every wait; nothing waits for silence.
const arrivalTimeout = 10 * time.Second

// expectTCP dials addr and checks who answers.
func (s *servers) expectTCP(t *testing.T, addr netip.AddrPort, want outcome) {
	t.Helper()
	before := s.snapshot()
	c, err := net.DialTimeout("tcp", addr.String(), arrivalTimeout)
	if want == refused {
		if err == nil {
			reply := make([]byte, 100)
			n, _ := c.Read(reply)
			c.Close()
			t.Fatalf("TCP %s: connected (server said %q), want it refused", addr, reply[:n])
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("TCP %s: %v, want connection refused", addr, err)
		}
		s.expectNoArrival(t, before)
		return
	}
	if err != nil {
		t.Fatalf("TCP %s: %v, want %s to answer", addr, err, want)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(arrivalTimeout))
	reply := make([]byte, 200)
	n, err := c.Read(reply)
	if err != nil {
		t.Fatalf("TCP %s: reading the server's name: %v", addr, err)
	}
	fields := strings.Fields(string(reply[:n]))
	if len(fields) != 2 {
		t.Fatalf("TCP %s: server said %q", addr, reply[:n])
	}
	s.checkWho(t, "TCP "+addr.String(), fields[0], fields[1], addr, want)
}

// expectUDP sends a datagram to addr from a connected client socket and
// checks who receives it; a refusal shows as ECONNREFUSED on the client,
// from the ICMP port unreachable the kernel sends when no socket took it.
func (s *servers) expectUDP(t *testing.T, addr netip.AddrPort, want outcome) {
	t.Helper()
	before := s.snapshot()
	payload := fmt.Sprintf("probe %s %d", addr, time.Now().UnixNano())
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatalf("UDP client to %s: %v", addr, err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(payload)); err != nil {
		t.Fatalf("UDP send to %s: %v", addr, err)
	}
	if want == refused {
		_ = c.SetReadDeadline(time.Now().Add(arrivalTimeout))
		if _, err := c.Read(make([]byte, 100)); !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("UDP %s: client read %v, want ECONNREFUSED (port unreachable)", addr, err)
		}
		s.expectNoArrival(t, before)
		return
	}
	for {
		a := s.next(t, "UDP "+addr.String())
		if a.payload != payload {
			continue
		}
		s.checkWho(t, "UDP "+addr.String(), a.server, a.local.String(), addr, want)
		if a.replyErr != nil {
			t.Fatalf("UDP %s: %s could not reply from %s: %v", addr, a.server, a.local, a.replyErr)
		}
		break
	}
	if want != ours {
		return
	}
	// The client's socket is connected to addr: it takes only replies whose
	// source is the service address.
	_ = c.SetReadDeadline(time.Now().Add(arrivalTimeout))
	buf := make([]byte, 200)
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != payload {
		t.Fatalf("UDP %s: reply %q, %v; want the echo from the service address", addr, buf[:n], err)
	}
}

func (s *servers) next(t *testing.T, what string) arrival {
	t.Helper()
	select {
	case a := <-s.arrivals:
		return a
	case <-time.After(arrivalTimeout):
		t.Fatalf("%s: nothing arrived within %v", what, arrivalTimeout)
		return arrival{}
	}
}

func (s *servers) checkWho(t *testing.T, what, server, local string, addr netip.AddrPort, want outcome) {
	t.Helper()
	switch want {
	case ours, discarding, nodeOnly:
		if !strings.HasPrefix(server, string(want)) {
			t.Fatalf("%s: reached %s, want the %s socket", what, server, want)
		}
		if local != addr.String() {
			t.Fatalf("%s: local address %s, want the service address %s", what, local, addr)
		}
	case node, squatter:
		if !strings.HasPrefix(server, string(want)) {
			t.Fatalf("%s: reached %s, want a %s socket", what, server, want)
		}
	}
}

func (s *servers) snapshot() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := make(map[string]int, len(s.count))
	for k, v := range s.count {
		c[k] = v
	}
	return c
}

// expectNoArrival fails when a server received anything since before.
func (s *servers) expectNoArrival(t *testing.T, before map[string]int) {
	t.Helper()
	for server, n := range s.snapshot() {
		if got := n - before[server]; got > 0 {
			t.Errorf("%s received %d since the probe was sent, want none", server, got)
		}
	}
}
