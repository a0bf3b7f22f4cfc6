package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// Stale conntrack flows: a UDP client that keeps sending from
// one source port must never stay pinned to a destination that is gone,
// in any mode whose traffic conntrack tracks through NAT. Every wait a case
// asserts on is bounded by ctMoveBound from the sync that made the change;
// the time from writing the services file to the first datagram that got
// through is logged as the end-to-end cleanup latency.

const (
	ctVIP        = "198.18.0.83"
	ctExternalIP = "198.18.5.83"
	ctNodePort   = 30083
	ctWebVIP     = "198.18.0.84"
	// ctMoveBound is the bound: within it of the sync, the flow's
	// next datagram reaches a remaining endpoint.
	ctMoveBound = 2 * time.Second
	// ctQuiet is how long a flow must go unanswered to count as stopped:
	// six datagrams at the flow's 50 ms pace.
	ctQuiet = 300 * time.Millisecond
	// ctUDPTimeout keeps a userspace relay's flow as long as the kernel
	// keeps a UDP conntrack entry (30 s): under the default 250 ms a busy
	// machine that delays one datagram ends the flow, and the next one
	// starts a new flow that may go to another endpoint, which these cases
	// would take for a flow kproxy moved.
	ctUDPTimeout = "--udp-timeout=30s"
)

// ctServices renders the UDP service "ct" (cluster IP, external IP and
// node port, port 53 to the prefixing echo on 9000) with endpoints on the
// given backends, and the TCP service "ctweb" (port 80 to nginx) with
// webBackends; withoutCT leaves "ct" and its slice out.
type ctServices struct {
	backends, webBackends []string
	withoutCT             bool
}

func (c ctServices) render() string {
	parts := []string{nodeDoc,
		httpService("ctweb", ctWebVIP, ""), httpSlice("ctweb", remoteEndpoints(c.webBackends, "")...)}
	if !c.withoutCT {
		parts = append(parts,
			serviceDoc("ct", fmt.Sprintf("type: NodePort, clusterIP: %s, externalIPs: [%s], "+
				"ports: [{name: dns, port: 53, protocol: UDP, targetPort: 9000, nodePort: %d}]", ctVIP, ctExternalIP, ctNodePort), ""),
			sliceDoc("ct-1", "ct", "{name: dns, port: 9000, protocol: UDP}", remoteEndpoints(c.backends, "")...))
	}
	return docs(parts...)
}

// ctClient is one client flow: a fixed source port on the client host
// sending to one of the service's destinations.
type ctClient struct {
	what string
	flow *udpFlow
}

// startCTClients starts a flow to each destination of "ct", from source
// ports 41001 and up, and waits until every one is answered.
func startCTClients(t *testing.T, l *e2eLab, dsts ...string) []*ctClient {
	t.Helper()
	var out []*ctClient
	for i, dst := range dsts {
		src := netip.AddrPortFrom(l.topo.Client.IPv4, uint16(41001+i))
		f, err := startUDPFlow(l.topo.Client, src, dst)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(f.close)
		out = append(out, &ctClient{what: "the flow " + src.String() + " -> " + dst, flow: f})
	}
	for _, c := range out {
		lab.Eventually(t, "the first replies to "+c.what, func() (bool, string) { return len(c.flow.since(0)) >= 3, "" })
	}
	return out
}

// pinned returns the backend that answers c, failing t if the flow has
// been answered by more than one.
func (c *ctClient) pinned(t *testing.T) string {
	t.Helper()
	replies := c.flow.since(0)
	for _, r := range replies {
		if r.backend != replies[0].backend {
			t.Fatalf("%s was answered by %s and %s, want one backend per flow", c.what, replies[0].backend, r.backend)
		}
	}
	return replies[0].backend
}

// ctChange is one edit of the services file and the sync it leads to.
type ctChange struct {
	// cause is what happened at written, for the logs.
	cause           string
	written, synced time.Time
	marks           []int // each client's reply count at written
}

// applyCT writes content and waits for kproxy's next sync.
func applyCT(t *testing.T, l *e2eLab, content string, clients []*ctClient) ctChange {
	t.Helper()
	c := ctChange{cause: "the services file was written"}
	for _, cl := range clients {
		c.marks = append(c.marks, len(cl.flow.since(0)))
	}
	syncs := lab.SyncCount(t)
	c.written = time.Now()
	l.write(t, content)
	lab.WaitSynced(t, l.kproxy, syncs+1)
	c.synced = time.Now()
	return c
}

// wantAnswered waits, at most ctMoveBound after the sync, for a reply to
// each client since the change from a backend ok accepts, and logs how long
// after the change's cause it came: the end-to-end latency.
func (c ctChange) wantAnswered(t *testing.T, clients []*ctClient, what string, ok func(backend string) bool) {
	t.Helper()
	for i, cl := range clients {
		var got time.Time
		lab.Within(t, ctMoveBound+time.Since(c.synced), cl.what+" "+what, func() (bool, string) {
			after := cl.flow.since(c.marks[i])
			for _, r := range after {
				if ok(r.backend) {
					got = r.at
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d replies since the change: %v", len(after), after)
		})
		t.Logf("%s %s: %v after %s (%v after kproxy's sync was seen)",
			cl.what, what, got.Sub(c.written).Round(time.Millisecond), c.cause, got.Sub(c.synced).Round(time.Millisecond))
	}
}

// wantSilenced waits, at most ctMoveBound after the sync, until no client
// has been answered for ctQuiet.
func (c ctChange) wantSilenced(t *testing.T, clients []*ctClient, what string) {
	t.Helper()
	for _, cl := range clients {
		lab.Within(t, ctMoveBound+ctQuiet+time.Since(c.synced), cl.what+" "+what, func() (bool, string) {
			replies := cl.flow.since(0)
			last := replies[len(replies)-1]
			return time.Since(last.at) >= ctQuiet, fmt.Sprintf("last reply from %s %v ago", last.backend, time.Since(last.at))
		})
	}
}

// logCleanupTime logs how long kproxy's conntrack cleanups took on
// average, from its kproxy_conntrack_cleanup_duration_seconds histogram.
func logCleanupTime(t *testing.T) {
	t.Helper()
	var values []float64
	for _, name := range []string{"kproxy_conntrack_cleanup_duration_seconds_sum",
		"kproxy_conntrack_cleanup_duration_seconds_count", "kproxy_conntrack_flows_deleted_total"} {
		v, ok := lab.Metric(name)
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			t.Errorf("kproxy's /metrics has no usable %s (%q)", name, v)
			return
		}
		values = append(values, f)
	}
	if sum, n, deleted := values[0], values[1], values[2]; n > 0 {
		t.Logf("kproxy ran %.0f conntrack cleanups, %v each on average, deleting %.0f flows in all",
			n, time.Duration(sum/n*float64(time.Second)).Round(time.Microsecond), deleted)
	}
}

// ctOtherThan accepts any backend but name.
func ctOtherThan(name string) func(string) bool { return func(b string) bool { return b != name } }

// ctAnyBackend accepts every backend.
func ctAnyBackend(string) bool { return true }

func TestConntrackEndpointRemovalOnEveryDestination(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		// One endpoint at first, so every flow is pinned to it.
		l := startLab(t, m, func(backends []string) string {
			return ctServices{backends: backends[:1], webBackends: backends}.render()
		}, ctUDPTimeout)
		if l == nil {
			return
		}
		clients := startCTClients(t, l, ctVIP+":53", ctExternalIP+":53", fmt.Sprintf("%s:%d", nodeIP, ctNodePort))
		for _, c := range clients {
			if got := c.pinned(t); got != "backend-1" {
				t.Fatalf("%s is answered by %s, want backend-1, the only endpoint", c.what, got)
			}
		}

		// New endpoints leave established flows where they are.
		added := applyCT(t, l, ctServices{backends: l.backends, webBackends: l.backends}.render(), clients)
		for i, c := range clients {
			lab.Within(t, ctMoveBound+time.Since(added.synced), c.what+" answered after the sync that added endpoints", func() (bool, string) {
				after := c.flow.since(added.marks[i])
				return len(after) > 0 && !after[len(after)-1].at.Before(added.synced), fmt.Sprintf("replies since the change: %v", after)
			})
		}
		time.Sleep(4 * ctQuiet)
		for i, c := range clients {
			for _, r := range c.flow.since(added.marks[i]) {
				if r.backend != "backend-1" {
					t.Fatalf("%s moved to %s when endpoints were added, want it left on backend-1", c.what, r.backend)
				}
			}
		}

		// The server on backend-1 still runs: only kproxy can move the flows.
		removed := applyCT(t, l, ctServices{backends: l.backendsExcept("backend-1"), webBackends: l.backends}.render(), clients)
		removed.wantAnswered(t, clients, "answered by a remaining endpoint after backend-1 was removed", ctOtherThan("backend-1"))
		logCleanupTime(t)
	})
}

func TestConntrackScaleToZeroAndBack(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, func(backends []string) string { return ctServices{backends: backends, webBackends: backends}.render() }, ctUDPTimeout)
		if l == nil {
			return
		}
		clients := startCTClients(t, l, ctVIP+":53")
		pinned := clients[0].pinned(t)

		zero := applyCT(t, l, ctServices{webBackends: l.backends}.render(), clients)
		zero.wantSilenced(t, clients, "unanswered once the service has no endpoints (its backends still run)")

		back := applyCT(t, l, ctServices{backends: l.backends, webBackends: l.backends}.render(), clients)
		back.wantAnswered(t, clients, "answered again once endpoints came back", ctAnyBackend)
		t.Logf("pinned to %s before the scale to zero", pinned)
		logCleanupTime(t)
	})
}

func TestConntrackServiceDeletedAndRecreated(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, func(backends []string) string { return ctServices{backends: backends, webBackends: backends}.render() }, ctUDPTimeout)
		if l == nil {
			return
		}
		clients := startCTClients(t, l, ctVIP+":53", fmt.Sprintf("%s:%d", nodeIP, ctNodePort))

		// While the service is gone the client keeps sending: conntrack
		// records those datagrams untranslated, and would keep them so.
		gone := applyCT(t, l, ctServices{webBackends: l.backends, withoutCT: true}.render(), clients)
		gone.wantSilenced(t, clients, "unanswered once the service is deleted")
		time.Sleep(time.Second)

		back := applyCT(t, l, ctServices{backends: l.backends, webBackends: l.backends}.render(), clients)
		back.wantAnswered(t, clients, "answered again once the service was created again", ctAnyBackend)
		logCleanupTime(t)
	})
}

func TestConntrackRestart(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, func(backends []string) string { return ctServices{backends: backends, webBackends: backends}.render() }, ctUDPTimeout)
		if l == nil {
			return
		}
		// Three flows, so a restart that moved flows would show even where
		// a moved flow may land on its old backend again by chance.
		clients := startCTClients(t, l, ctVIP+":53", ctExternalIP+":53", fmt.Sprintf("%s:%d", nodeIP, ctNodePort))
		var pinned []string
		for _, c := range clients {
			pinned = append(pinned, c.pinned(t))
		}

		if err := l.kproxy.Stop(); err != nil {
			t.Fatal(err)
		}
		restart := ctChange{cause: "kproxy was stopped", written: time.Now()}
		for _, c := range clients {
			restart.marks = append(restart.marks, len(c.flow.since(0)))
		}
		l.runKproxy(t, nil)
		restart.synced = time.Now()

		if m.relays {
			// The relays listen on new proxy ports: flows the portals sent
			// to the old ones must find the new ones.
			restart.wantAnswered(t, clients, "answered again after kproxy restarted on new proxy ports", ctAnyBackend)
			logCleanupTime(t)
			return
		}
		// Kernel NAT kept working while kproxy was down; a restart must not
		// move a healthy flow.
		time.Sleep(4 * ctQuiet)
		for i, c := range clients {
			after := c.flow.since(restart.marks[i])
			if len(after) == 0 || after[len(after)-1].at.Before(restart.synced) {
				t.Fatalf("%s got no reply after kproxy restarted: %v", c.what, after)
			}
			for _, r := range after {
				if r.backend != pinned[i] {
					t.Fatalf("%s moved from %s to %s when kproxy restarted, want it left alone", c.what, pinned[i], r.backend)
				}
			}
		}
	})
}

// TestConntrackLeavesTCPAlone removes, in one sync, the endpoint a UDP
// flow is pinned to and the endpoint an open TCP connection to another
// service uses: the UDP flow moves, the TCP connection keeps working, as
// its conntrack entry is left to the kernel.
func TestConntrackLeavesTCPAlone(t *testing.T) {
	forModes(t, func(m proxyMode) bool { return !m.relays }, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, func(backends []string) string { return ctServices{backends: backends, webBackends: backends}.render() }, ctUDPTimeout)
		if l == nil {
			return
		}
		clients := startCTClients(t, l, ctVIP+":53")
		udpBackend := clients[0].pinned(t)

		conn, err := l.topo.Client.Dial("tcp", ctWebVIP+":80")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		web := bufio.NewReader(conn)
		tcpBackend, err := keepAliveGet(conn, web)
		if err != nil {
			t.Fatalf("the first request on the TCP connection: %v", err)
		}

		removed := applyCT(t, l, ctServices{backends: l.backendsExcept(udpBackend, tcpBackend),
			webBackends: l.backendsExcept(udpBackend, tcpBackend)}.render(), clients)
		removed.wantAnswered(t, clients, "answered by a remaining endpoint after "+udpBackend+" was removed", ctOtherThan(udpBackend))

		got, err := keepAliveGet(conn, web)
		if err != nil || got != tcpBackend {
			t.Fatalf("the TCP connection to %s after its endpoint was removed: answer %q, error %v; want %s to answer, "+
				"as its conntrack entry must be left alone", tcpBackend, got, err, tcpBackend)
		}
		if out := l.topo.Node.MustExec("conntrack", "-L", "-p", "tcp", "--orig-dst", ctWebVIP); !strings.Contains(out, "ESTABLISHED") {
			t.Errorf("no established conntrack entry to %s is left:\n%s", ctWebVIP, out)
		}
	})
}

// keepAliveGet sends one HTTP/1.1 request on conn and returns the body (the
// backend's name), leaving the connection open.
func keepAliveGet(conn net.Conn, r *bufio.Reader) (string, error) {
	_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(conn, "GET / HTTP/1.1\r\nHost: ctweb\r\n\r\n"); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return strings.TrimSpace(string(body)), err
}
