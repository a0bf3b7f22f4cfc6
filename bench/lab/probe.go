package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/guest"
)

// Probes: the small clients, servers and waits that end-to-end tests drive
// the data plane with. They live here, not in each test package, so every
// test asks the same question the same way.

// KproxyMetricsURL is where kproxy (like kube-proxy) serves /metrics by
// default; the tests run it in their own network namespace, so the default
// port is free.
const KproxyMetricsURL = "http://127.0.0.1:10249/metrics"

// SyncCountMetric counts kproxy's finished syncs.
const SyncCountMetric = "kubeproxy_sync_proxy_rules_duration_seconds_count"

// EventuallyTimeout bounds Eventually on the host: generous, as it waits for
// setup (processes starting, files being watched), not for what a test
// measures. With every suite of make test side by side, kproxy's kernel
// probe alone once took 9 s and its first sync more than 15.
const EventuallyTimeout = time.Minute

// guestSlowdown stretches setup waits in the guest kernel, whose syscalls are
// about 60 times slower than the host's: a Go test binary started there next
// to the other suites of a busy CI run took more than the host's bound.
const guestSlowdown = 4

// SetupBound is how long Eventually waits here: EventuallyTimeout on the
// host, guestSlowdown times that in the guest kernel.
func SetupBound() time.Duration { return stretched(EventuallyTimeout) }

// stretched is a setup wait's bound d on the host, guestSlowdown times d in
// the guest kernel.
func stretched(d time.Duration) time.Duration {
	if guest.InGuest() {
		return guestSlowdown * d
	}
	return d
}

// pollInterval is how often Eventually and Within ask again.
const pollInterval = 50 * time.Millisecond

// Dialer dials from somewhere: a *Host of the topology, or a *net.Dialer in
// the test's own namespace (with LocalAddr set, from a chosen source address).
type Dialer interface {
	DialContext(ctx context.Context, network, address string) (net.Conn, error)
}

// Eventually polls cond until it holds, failing tb after SetupBound with
// what it waited for and cond's last detail.
func Eventually(tb testing.TB, what string, cond func() (ok bool, detail string)) {
	tb.Helper()
	Within(tb, SetupBound(), what, cond)
}

// Within polls cond until it holds, failing tb once bound has passed without
// it; cond is asked at least once. Use it where the bound is what the test
// checks, Eventually where it only waits.
func Within(tb testing.TB, bound time.Duration, what string, cond func() (ok bool, detail string)) {
	tb.Helper()
	start := time.Now()
	for {
		ok, detail := cond()
		if ok {
			return
		}
		if time.Since(start) > bound {
			tb.Fatalf("%s did not happen within %v; last seen:\n%s", what, bound, detail)
		}
		time.Sleep(pollInterval)
	}
}

// Spread asks n times and counts the answers (typically backend names),
// failing tb at the first failed request.
func Spread(tb testing.TB, n int, ask func() (string, error)) map[string]int {
	tb.Helper()
	seen := map[string]int{}
	for i := range n {
		got, err := ask()
		if err != nil {
			tb.Fatalf("request %d of %d failed: %v", i+1, n, err)
		}
		seen[got]++
	}
	return seen
}

// HTTPGet fetches url from h on a new connection (keep-alives off, so every
// request is balanced afresh) with a 3 s timeout, and returns the body
// without surrounding white space.
func HTTPGet(h *Host, url string) (string, error) {
	_, body, err := HTTPGetStatus(h, url)
	return body, err
}

// HTTPGetStatus is HTTPGet dialling with d (a *Host, or FromAddress for a
// chosen source address) that also returns the status code; a non-2xx
// status is not an error.
func HTTPGetStatus(d Dialer, url string) (status int, body string, err error) {
	client := &http.Client{
		Timeout:   3 * time.Second,
		Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true, DisableCompression: true},
	}
	resp, err := client.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(data)), err
}

// FromAddress returns a Dialer that dials from h with source address src,
// which must be one of h's addresses: a second client behind one host.
func FromAddress(h *Host, src netip.Addr) Dialer { return sourceDialer{h, src} }

type sourceDialer struct {
	h   *Host
	src netip.Addr
}

func (s sourceDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var conn net.Conn
	err := s.h.InNetns(func() (err error) {
		d := net.Dialer{}
		if strings.HasPrefix(network, "udp") {
			d.LocalAddr = net.UDPAddrFromAddrPort(netip.AddrPortFrom(s.src, 0))
		} else {
			d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(s.src, 0))
		}
		conn, err = d.DialContext(ctx, network, address)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("dialling %s from %s on %s: %w", address, s.src, s.h.Name, err)
	}
	return conn, nil
}

// A UDP ask sends its datagram again, on the same socket and so in the same
// flow, when no answer came within udpResendAfter, as a DNS resolver does:
// a datagram lost or held up on a busy machine (the guest kernel's e2e run
// shares two loaded cores) is not a failed request. It gives up after
// udpAskTimeout, so a check that wants no answer waits that long.
const (
	udpAskTimeout  = 4 * time.Second
	udpResendAfter = time.Second
)

// UDPAsk sends msg as a datagram to addr on a connected socket and returns
// the first datagram that answers it, sending msg again each
// udpResendAfter and waiting at most udpAskTimeout in all. An ICMP port
// unreachable for msg shows up as ECONNREFUSED. The socket closes on return,
// freeing its source port for the next one (see UDPAskHeld).
func UDPAsk(d Dialer, addr, msg string) (string, error) {
	conn, err := dialBounded(d, "udp", addr, udpAskTimeout)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	return askOn(conn, msg)
}

// UDPAskHeld is UDPAsk that keeps its socket, and so its source port, until
// tb ends. A relay, like conntrack, keys a UDP flow by the client's address
// and port, and the kernel may give a closed socket's port to the very next
// socket: an ask that gets the port of an earlier one whose flow is still
// alive joins that flow, and its endpoint, instead of starting its own. No
// socket of the host can take a held port, so no two asks made with it while
// tb runs share one: checks that count new flows (round-robin turns) ask
// with it.
func UDPAskHeld(tb testing.TB, d Dialer, addr, msg string) (string, error) {
	tb.Helper()
	answer, _, err := UDPAskHeldCounted(tb, d, addr, msg)
	return answer, err
}

// UDPAskHeldCounted is UDPAskHeld that also says how many times msg was
// sent. A datagram sent again can reach a relay after the flow of the first
// one has idled out, and so start a flow of its own: a round-robin turn the
// asker never sees the answer of.
func UDPAskHeldCounted(tb testing.TB, d Dialer, addr, msg string) (answer string, sends int, err error) {
	tb.Helper()
	conn, err := dialBounded(d, "udp", addr, udpAskTimeout)
	if err != nil {
		return "", 0, err
	}
	tb.Cleanup(func() { conn.Close() })
	return askCounted(conn, msg)
}

// askOn sends msg on the connected UDP socket conn, again every
// udpResendAfter until an answer or an error comes, and returns the first
// answer, giving up after udpAskTimeout.
func askOn(conn net.Conn, msg string) (string, error) {
	answer, _, err := askCounted(conn, msg)
	return answer, err
}

// askCounted is askOn that also returns how many times msg was sent.
func askCounted(conn net.Conn, msg string) (answer string, sends int, err error) {
	deadline := time.Now().Add(udpAskTimeout)
	buf := make([]byte, MaxUDPPayload)
	for {
		if _, err := io.WriteString(conn, msg); err != nil {
			return "", sends, err
		}
		sends++
		wait := time.Now().Add(udpResendAfter)
		if wait.After(deadline) {
			wait = deadline
		}
		_ = conn.SetReadDeadline(wait)
		n, err := conn.Read(buf)
		var ne net.Error
		if err == nil || !errors.As(err, &ne) || !ne.Timeout() || !wait.Before(deadline) {
			return string(buf[:n]), sends, err
		}
	}
}

// TCPGreeting connects to addr over TCP and returns what the server sends
// first (one read of up to 512 bytes), waiting at most 5 s to connect and 5 s
// more for the answer. A refused connection (a reset answering the SYN) is
// ECONNREFUSED.
func TCPGreeting(d Dialer, addr string) (string, error) {
	conn, err := dialBounded(d, "tcp", addr, 5*time.Second)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	buf := make([]byte, 512)
	n, err := conn.Read(buf)
	return string(buf[:n]), err
}

// dialBounded dials addr with d within timeout, and gives the connection's
// reads and writes the same timeout from then on.
func dialBounded(d Dialer, network, addr string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	return conn, nil
}

// ServeGreeting listens on TCP address addr (such as "0.0.0.0:0") in the
// current network namespace and writes greeting to every connection, then
// closes it; the counterpart of TCPGreeting. The listener closes when the
// test ends. It returns the address listened on.
func ServeGreeting(tb testing.TB, addr, greeting string) netip.AddrPort {
	tb.Helper()
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		tb.Fatalf("listening for the greeting server: %v", err)
	}
	tb.Cleanup(func() { ln.Close() })
	go ServeGreetingOn(ln, greeting)
	ap := ln.Addr().(*net.TCPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// ServeGreetingOn writes greeting to every connection ln accepts, then
// closes it, until ln is closed.
func ServeGreetingOn(ln net.Listener, greeting string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_, _ = io.WriteString(c, greeting)
		c.Close()
	}
}

// UDPExchange sends msg on a connected UDP socket and returns the answer
// that comes within wait: for a flow that must keep its source port across
// several exchanges, where UDPAsk opens a new one each time.
func UDPExchange(c net.Conn, msg string, wait time.Duration) (string, error) {
	if _, err := io.WriteString(c, msg); err != nil {
		return "", err
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, MaxUDPPayload)
	n, err := c.Read(buf)
	return string(buf[:n]), err
}

// ServeUDPEcho binds UDP address addr (such as "0.0.0.0:0") in the current
// network namespace and sends every datagram back to its sender unchanged;
// the counterpart of UDPAsk. The socket closes when the test ends. It
// returns the address bound.
func ServeUDPEcho(tb testing.TB, addr string) netip.AddrPort {
	tb.Helper()
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		tb.Fatalf("binding the UDP echo server: %v", err)
	}
	tb.Cleanup(func() { pc.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = pc.WriteTo(buf[:n], from)
		}
	}()
	ap := pc.LocalAddr().(*net.UDPAddr).AddrPort()
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// MetricSamples scrapes kproxy's /metrics in the current network namespace
// and returns the sample lines of the named metric families, labelled or
// not, in the order served.
func MetricSamples(families ...string) ([]string, error) {
	client := http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(KproxyMetricsURL)
	if err != nil {
		return nil, fmt.Errorf("scraping kproxy's metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("scraping kproxy's metrics: %s", resp.Status)
	}
	var out []string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, f := range families {
			if strings.HasPrefix(line, f+" ") || strings.HasPrefix(line, f+"{") {
				out = append(out, line)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading kproxy's metrics: %w", err)
	}
	return out, nil
}

// Metric returns the value of kproxy's unlabelled sample name or, for a
// metric with kube-proxy's ip_family label and no other (a kproxy sync
// covers every family, so all carry the same value), the largest of its
// families; false if /metrics cannot be read or lacks it (as before kproxy
// listens).
func Metric(name string) (string, bool) {
	samples, err := MetricSamples(name)
	if err != nil {
		return "", false
	}
	best, bestV, found := "", 0.0, false
	for _, s := range samples {
		if v, ok := strings.CutPrefix(s, name+" "); ok {
			return v, true
		}
		rest, ok := strings.CutPrefix(s, name+`{ip_family="`)
		if !ok {
			continue
		}
		fam, v, ok := strings.Cut(rest, `"} `)
		if !ok || strings.ContainsAny(fam, `",`) {
			continue
		}
		var f float64
		if _, err := fmt.Sscan(v, &f); err != nil {
			continue
		}
		if !found || f > bestV {
			best, bestV, found = v, f, true
		}
	}
	return best, found
}

// SyncCount returns how many syncs kproxy has finished, failing tb if its
// /metrics does not say.
func SyncCount(tb testing.TB) int {
	tb.Helper()
	v, ok := Metric(SyncCountMetric)
	if !ok {
		tb.Fatalf("kproxy's sync count (%s) is not in %s", SyncCountMetric, KproxyMetricsURL)
	}
	var n int
	if _, err := fmt.Sscan(v, &n); err != nil {
		tb.Fatalf("kproxy's sync count %q: %v", v, err)
	}
	return n
}

// WaitSynced waits until kproxy, running as kp, has finished at least n
// syncs, failing tb (with kproxy's log) if it exits first or takes longer
// than SetupBound.
func WaitSynced(tb testing.TB, kp *Process, n int) {
	tb.Helper()
	WaitSyncedWithin(tb, SetupBound(), kp, n)
}

// WaitSyncedWithin is WaitSynced waiting up to bound.
func WaitSyncedWithin(tb testing.TB, bound time.Duration, kp *Process, n int) {
	tb.Helper()
	Within(tb, bound, fmt.Sprintf("kproxy to finish %d sync(s)", n), func() (bool, string) {
		select {
		case <-kp.Exited():
			tb.Fatalf("kproxy exited: %v\n%s", kp.Err(), kp.Log())
		default:
		}
		v, ok := Metric(SyncCountMetric)
		var got int
		_, err := fmt.Sscan(v, &got)
		return ok && err == nil && got >= n, v
	})
}

// WithoutComments drops the comment lines of iptables-save output, which
// carry timestamps, so two dumps compare equal when the rules are.
func WithoutComments(save string) string {
	var b strings.Builder
	for _, line := range strings.SplitAfter(save, "\n") {
		if !strings.HasPrefix(line, "#") {
			b.WriteString(line)
		}
	}
	return b.String()
}

// AddNodeLink makes the test's own network namespace a bare node for kernel
// tests that need no topology: a veth link node0 (this kernel has no dummy
// links) holding the given addresses (CIDR, such as "198.19.0.1/24"), its
// peer node1 up, and a route for the service range 198.18.0.0/16 through it,
// so connections to service IPs leave through OUTPUT, where portal and
// refusal rules catch them.
func AddNodeLink(tb testing.TB, cidrs ...string) {
	tb.Helper()
	Run(tb, "ip", "link", "add", "node0", "type", "veth", "peer", "name", "node1")
	Run(tb, "ip", "link", "set", "node1", "up")
	for _, cidr := range cidrs {
		Run(tb, "ip", "addr", "add", cidr, "dev", "node0")
	}
	Run(tb, "ip", "link", "set", "node0", "up")
	Run(tb, "ip", "route", "add", "198.18.0.0/16", "dev", "node0")
}
