package e2e

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// hijackPortEnv tells TestHijackerHelper, run as an unprivileged user, which
// port to bind; hijackAnswer is what it says to anyone who connects.
const (
	hijackPortEnv = "KPROXY_E2E_HIJACK_PORT"
	hijackAddrEnv = "KPROXY_E2E_HIJACK_ADDR"
	// hijackUDPEnv, when set, is a UDP port the helper binds too, on the
	// same address, answering every datagram with hijackAnswer.
	hijackUDPEnv = "KPROXY_E2E_HIJACK_UDP_PORT"
	hijackAnswer = "hijacked"
	nobody       = 65534
)

// TestHijackerHelper is not a test: run with hijackPortEnv set (by
// startHijacker, as uid 65534), it plays a local user who binds a port the
// userspace mode's portals may still point at and answers every connection.
func TestHijackerHelper(t *testing.T) {
	port := os.Getenv(hijackPortEnv)
	if port == "" {
		t.Skip("a helper process of TestStoppedProxyCannotBeHijacked")
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		// An unprivileged process may bind an address that is not local.
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_IP, syscall.IP_FREEBIND, 1) })
	}}
	ln, err := lc.Listen(t.Context(), "tcp4", net.JoinHostPort(os.Getenv(hijackAddrEnv), port))
	if err != nil {
		fmt.Printf("bind failed: %v\n", err)
		return
	}
	if udpPort := os.Getenv(hijackUDPEnv); udpPort != "" {
		pc, err := lc.ListenPacket(t.Context(), "udp4", net.JoinHostPort(os.Getenv(hijackAddrEnv), udpPort))
		if err != nil {
			fmt.Printf("bind failed: %v\n", err)
			return
		}
		go func() {
			buf := make([]byte, 512)
			for {
				_, from, err := pc.ReadFrom(buf)
				if errors.Is(err, net.ErrClosed) {
					return
				}
				if err == nil {
					_, _ = pc.WriteTo([]byte(hijackAnswer), from)
				}
			}
		}()
	}
	fmt.Printf("listening as uid %d\n", os.Getuid())
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = c.Write([]byte(hijackAnswer + "\n"))
		c.Close()
	}
}

// startHijacker runs TestHijackerHelper on the node as uid 65534, bound to
// addr:port (addr empty: every address), and returns once it has bound or
// failed to.
func (l *e2eLab) startHijacker(t *testing.T, addr string, port int, udpPort ...int) *lab.Process {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := []string{hijackPortEnv + "=" + strconv.Itoa(port), hijackAddrEnv + "=" + addr}
	for _, p := range udpPort {
		env = append(env, hijackUDPEnv+"="+strconv.Itoa(p))
	}
	p := l.topo.Node.Start("env", append(env,
		"setpriv", "--reuid="+strconv.Itoa(nobody), "--regid="+strconv.Itoa(nobody), "--clear-groups",
		self, "-test.run=^TestHijackerHelper$", "-test.v")...)
	lab.Eventually(t, "the unprivileged hijacker to bind or fail", func() (bool, string) {
		log := p.Log()
		return regexp.MustCompile(`listening as uid|bind failed`).MatchString(log), log
	})
	t.Logf("hijacker on %s:%d: %s", addr, port, regexp.MustCompile(`(listening as uid \d+|bind failed.*)`).FindString(p.Log()))
	return p
}

// TestStoppedProxyCannotBeHijacked: once the userspace mode stops, its
// portals must not keep sending service traffic to ports (or, for local
// portals, service addresses) nobody holds: a local user who binds them
// would receive it. A later start puts the portals back.
func TestStoppedProxyCannotBeHijacked(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return m.relays }, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m)
		if l == nil {
			return
		}
		url := "http://" + digestVIP + ":9002/"
		// The port a local user would bind: the proxy port the portal
		// points at, or (local portals) the service address itself.
		hijackAddr, hijackPort := digestVIP, 9002
		var hijackUDP []int
		if !m.localPortals {
			match := regexp.MustCompile(`-d ` + regexp.QuoteMeta(digestVIP) + `/32 .*--to-ports (\d+)`).FindStringSubmatch(l.natRules(t))
			if match == nil {
				t.Fatalf("no portal for %s in\n%s", digestVIP, l.natRules(t))
			}
			hijackAddr, hijackPort = "", mustAtoi(t, match[1])
			hijackUDP = append(hijackUDP, l.udpProxyPort(t, echoVIP))
		}
		// A UDP flow conntrack would keep redirecting to the freed port.
		flow, err := l.topo.Client.Dial("udp4", echoVIP+":53")
		if err != nil {
			t.Fatal(err)
		}
		defer flow.Close()
		if got, err := lab.UDPExchange(flow, "before", time.Second); err != nil {
			t.Fatalf("UDP flow before the stop: %q, %v", got, err)
		}
		if err := l.kproxy.Stop(); err != nil {
			t.Fatalf("stopping kproxy: %v", err)
		}
		hijacker := l.startHijacker(t, hijackAddr, hijackPort, hijackUDP...)
		defer hijacker.Stop()
		if got, err := lab.UDPExchange(flow, "after", time.Second); got == hijackAnswer {
			t.Errorf("after kproxy stopped, the UDP flow's next datagram reached an unprivileged process on proxy port %v", hijackUDP)
		} else {
			t.Logf("UDP flow after the stop: %q, %v", got, err)
		}
		for _, from := range []*lab.Host{l.topo.Client, l.topo.Node} {
			if got, err := tcpFirstLine(from, digestVIP+":9002"); got == hijackAnswer {
				t.Errorf("after kproxy stopped, a connection from %s to %s reached an unprivileged process on port %d", from.Name, url, hijackPort)
			} else {
				t.Logf("from %s after the stop: %q, %v", from.Name, got, err)
			}
		}
		hijacker.Stop()

		// The next start serves the service again.
		l.startKproxy(t, nil, kproxyArgs(m, "--services-file="+l.manifest))
		lab.Eventually(t, "the service to answer after the restart", func() (bool, string) {
			got, err := tcpFirstLine(l.topo.Client, digestVIP+":9002")
			return err == nil && got != hijackAnswer, fmt.Sprintf("%q, %v", got, err)
		})
	})
}

// crashProxyPortRange is below net.ipv4.ip_unprivileged_port_start (1024):
// no unprivileged process can bind a proxy port from it.
const crashProxyPortRange = "700-799"

// TestCrashedProxyCannotBeHijacked: after a crash (SIGKILL) the REDIRECT
// portals stay until the next start. Redirected traffic passes only into
// IP_TRANSPARENT sockets, as the relays' are (setting it takes CAP_NET_ADMIN
// or CAP_NET_RAW), so a process of uid 65534 that binds the freed proxy port
// receives nothing; with proxy ports in the privileged range it cannot even
// bind it.
func TestCrashedProxyCannotBeHijacked(t *testing.T) {
	cases := []struct {
		name      string
		args      []string
		wantBound bool // the unprivileged process can bind the freed port
	}{
		{"kernel-chosen proxy ports", nil, true},
		{"privileged proxy-port-range", []string{"--proxy-port-range=" + crashProxyPortRange}, false},
	}
	forModes(t, func(m proxyMode) bool { return m.relays && !m.localPortals }, func(t *testing.T, m proxyMode) {
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				l := startCoreLab(t, m, tc.args...)
				if l == nil {
					return
				}
				match := regexp.MustCompile(`-d ` + regexp.QuoteMeta(digestVIP) + `/32 .*--to-ports (\d+)`).FindStringSubmatch(l.natRules(t))
				if match == nil {
					t.Fatalf("no portal for %s in\n%s", digestVIP, l.natRules(t))
				}
				port := mustAtoi(t, match[1])
				if !tc.wantBound && (port < 700 || port > 799) {
					t.Fatalf("proxy port %d is outside --proxy-port-range=%s", port, crashProxyPortRange)
				}
				udpPort := l.udpProxyPort(t, echoVIP)
				// A UDP flow conntrack keeps redirecting as long as it
				// sends, across the crash.
				flow, err := l.topo.Client.Dial("udp4", echoVIP+":53")
				if err != nil {
					t.Fatal(err)
				}
				defer flow.Close()
				if got, err := lab.UDPExchange(flow, "before", time.Second); err != nil {
					t.Fatalf("UDP flow before the crash: %q, %v", got, err)
				}
				if err := l.kproxy.Kill(); err != nil {
					t.Fatal(err)
				}
				if !strings.Contains(l.natRules(t), "--to-ports "+match[1]) {
					t.Fatalf("the portal to proxy port %d went with the crash: the case tests nothing", port)
				}
				hijacker := l.startHijacker(t, "", port, udpPort)
				defer hijacker.Stop()
				if got, err := lab.UDPExchange(flow, "after", time.Second); got == hijackAnswer {
					t.Errorf("after the crash the UDP flow's next datagram reached an unprivileged process on proxy port %d", udpPort)
				} else {
					t.Logf("UDP flow after the crash: %q, %v", got, err)
				}
				if bound := !strings.Contains(hijacker.Log(), "bind failed"); bound != tc.wantBound {
					t.Errorf("uid %d bound proxy port %d: %v, want %v:\n%s", nobody, port, bound, tc.wantBound, hijacker.Log())
				}
				for _, from := range []*lab.Host{l.topo.Client, l.topo.Node} {
					if got, err := tcpFirstLine(from, digestVIP+":9002"); got == hijackAnswer {
						t.Errorf("after the crash a connection from %s to %s:9002 reached an unprivileged process on proxy port %d", from.Name, digestVIP, port)
					} else {
						t.Logf("from %s after the crash: %q, %v", from.Name, got, err)
					}
				}
			})
		}
	})
}

// udpProxyPort is the proxy port vip's UDP portal redirects to.
func (l *e2eLab) udpProxyPort(t *testing.T, vip string) int {
	t.Helper()
	match := regexp.MustCompile(`-d ` + regexp.QuoteMeta(vip) + `/32 -p udp .*--to-ports (\d+)`).FindStringSubmatch(l.natRules(t))
	if match == nil {
		t.Fatalf("no UDP portal for %s in\n%s", vip, l.natRules(t))
	}
	return mustAtoi(t, match[1])
}

// tcpFirstLine connects from h to addr and returns the first line it says
// within a second (the digest server says nothing first: "").
func tcpFirstLine(h *lab.Host, addr string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	c, err := h.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 64)
	n, _ := c.Read(buf)
	line := string(buf[:n])
	if i := len(line); i > 0 && line[i-1] == '\n' {
		line = line[:i-1]
	}
	return line, nil
}

func mustAtoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// stopFlows is how many UDP flows to a service TestStopUnderManyUDPFlows
// leaves in conntrack: as many as a node under DNS traffic holds.
// They come from client ports stopFirstPort on.
const (
	stopFlows     = 20_000
	stopFirstPort = 20_000
)

// TestStopUnderManyUDPFlows: a stop deletes the relays' UDP flows from
// conntrack (see TestStoppedProxyCannotBeHijacked), and does it without
// keeping the exiting process alive long after its portals are gone: the
// time from SIGTERM to exit is printed, with 20,000 flows in the table
// (conntrack's BenchmarkStoppedRelays and TestNetlinkTableDeletesInBatches
// measure and pin down how they are deleted). Every flow must be gone when
// the process has exited.
func TestStopUnderManyUDPFlows(t *testing.T) {
	// Local portals pass no netfilter rule, so conntrack tracks nothing.
	forModes(t, func(m proxyMode) bool { return m.relays && !m.localPortals }, func(t *testing.T, m proxyMode) {
		l := startCoreLab(t, m)
		if l == nil {
			return
		}
		// One datagram from each of stopFlows client ports: a flow each.
		vip := &net.UDPAddr{IP: net.ParseIP(echoVIP), Port: 53}
		if err := l.topo.Client.InNetns(func() error {
			for i := range stopFlows {
				c, err := net.DialUDP("udp4", &net.UDPAddr{Port: stopFirstPort + i}, vip)
				if err != nil {
					return err
				}
				_, err = c.Write([]byte("flow"))
				c.Close()
				if err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatalf("sending from %d client ports: %v", stopFlows, err)
		}
		before := serviceFlows(t, l)
		if before < stopFlows*9/10 {
			t.Fatalf("%d UDP flows to %s:53 in conntrack before the stop, want about %d: the case tests nothing", before, echoVIP, stopFlows)
		}

		start := time.Now()
		if err := syscall.Kill(l.kproxy.Pid(), syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-l.kproxy.Exited():
		case <-time.After(time.Minute):
			t.Fatalf("kproxy did not exit within a minute of SIGTERM; its log:\n%s", l.kproxy.Log())
		}
		t.Logf("SIGTERM to exit with %d UDP flows to a service in conntrack: %v", before, time.Since(start).Round(time.Millisecond))
		if err := l.kproxy.Err(); err != nil {
			t.Fatalf("kproxy exited with %v; its log:\n%s", err, l.kproxy.Log())
		}
		if left := serviceFlows(t, l); left != 0 {
			t.Errorf("%d of %d UDP flows to %s:53 left in conntrack after the stop", left, before, echoVIP)
		}
		if deleted := regexp.MustCompile(`Deleted the stopped relays' conntrack flows.* flows=(\d+)`).FindStringSubmatch(l.kproxy.Log()); deleted == nil {
			t.Errorf("kproxy did not log the deletion of its relays' flows:\n%s", l.kproxy.Log())
		} else {
			t.Logf("kproxy deleted %s flows", deleted[1])
		}
	})
}

// serviceFlows counts the UDP flows to echo's service address in the node's
// conntrack table.
func serviceFlows(t *testing.T, l *e2eLab) int {
	t.Helper()
	out, err := l.topo.Node.Exec("conntrack", "-L", "-p", "udp", "--orig-dst", echoVIP, "--dport", "53")
	if err != nil {
		t.Fatalf("listing conntrack: %v\n%s", err, out)
	}
	return strings.Count(out, "dport=53 ")
}
