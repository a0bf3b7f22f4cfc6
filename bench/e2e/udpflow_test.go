package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

const (
	udpVIP        = "198.18.0.80"
	udpClientPort = 40053
	// udpMoveBound is how soon after the sync that removes its endpoint a
	// live UDP flow must reach another one: the proxy has to forget the
	// flow's pinning (relay flow table or conntrack entry) itself.
	udpMoveBound = 2 * time.Second
)

// udpReply is one answer of the UDP echo server, as the client saw it.
type udpReply struct {
	backend string
	at      time.Time
}

// udpFlow is one client socket that keeps sending to a UDP service and
// records who answers.
type udpFlow struct {
	conn *net.UDPConn
	stop chan struct{}
	wg   sync.WaitGroup

	mu      sync.Mutex
	replies []udpReply
}

// startUDPFlow sends a datagram every 50 ms from a fixed source port of h to
// addr until stop: one flow for the whole test.
func startUDPFlow(h *lab.Host, src netip.AddrPort, addr string) (*udpFlow, error) {
	f := &udpFlow{stop: make(chan struct{})}
	err := h.InNetns(func() (err error) {
		f.conn, err = net.DialUDP("udp4", net.UDPAddrFromAddrPort(src), net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("opening the UDP client socket on %s: %w", h.Name, err)
	}
	f.wg.Add(2)
	go f.send()
	go f.receive()
	return f, nil
}

func (f *udpFlow) send() {
	defer f.wg.Done()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-f.stop:
			return
		case <-tick.C:
			_, _ = fmt.Fprintf(f.conn, "query %d", i)
		}
	}
}

func (f *udpFlow) receive() {
	defer f.wg.Done()
	buf := make([]byte, 2048)
	for {
		n, err := f.conn.Read(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			continue // e.g. an ICMP error while the flow moves
		}
		backend, _, _ := strings.Cut(string(buf[:n]), " ")
		f.mu.Lock()
		f.replies = append(f.replies, udpReply{backend, time.Now()})
		f.mu.Unlock()
	}
}

// since returns the replies from the i-th on.
func (f *udpFlow) since(i int) []udpReply {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.replies[min(i, len(f.replies)):])
}

func (f *udpFlow) close() {
	close(f.stop)
	f.conn.Close()
	f.wg.Wait()
}

func TestUDPEndpointRemoval(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		render := func(backends []string) string {
			svc := serviceDoc("udp", "clusterIP: "+udpVIP+", ports: [{name: dns, port: 53, protocol: UDP, targetPort: 9000}]", "")
			return docs(nodeDoc, svc, sliceDoc("udp-1", "udp", "{name: dns, port: 9000, protocol: UDP}", remoteEndpoints(backends, "")...))
		}
		l := startLab(t, m, render)
		if l == nil {
			return
		}
		flow, err := startUDPFlow(l.topo.Client, netip.AddrPortFrom(l.topo.Client.IPv4, udpClientPort), udpVIP+":53")
		if err != nil {
			t.Fatal(err)
		}
		defer flow.close()

		lab.Eventually(t, "the first replies", func() (bool, string) { return len(flow.since(0)) >= 5, "" })
		first := flow.since(0)
		pinned := first[0].backend
		for _, r := range first {
			if r.backend != pinned {
				t.Fatalf("one client flow was answered by %s and %s, want one backend per flow", pinned, r.backend)
			}
		}

		syncs := lab.SyncCount(t)
		l.write(t, render(l.backendsExcept(pinned)))
		lab.WaitSynced(t, l.kproxy, syncs+1)
		synced := time.Now()
		mark := len(flow.since(0))

		// The removed backend's server still runs: only kproxy can move
		// the flow away from it.
		lab.Within(t, udpMoveBound, "the flow reaching another backend after "+pinned+" was removed", func() (bool, string) {
			after := flow.since(mark)
			for i, r := range after {
				if r.backend != pinned {
					t.Logf("the flow moved from %s to %s %v after the sync", pinned, r.backend, r.at.Sub(synced))
					mark += i
					return true, ""
				}
			}
			return false, fmt.Sprintf("%d replies since the sync, all from %s", len(after), pinned)
		})
		// From then on the flow stays away from the removed backend.
		lab.Eventually(t, "more replies after the move", func() (bool, string) { return len(flow.since(mark)) >= 10, "" })
		for _, r := range flow.since(mark) {
			if r.backend == pinned {
				t.Fatalf("%s answered the flow again after it was removed: %v", pinned, flow.since(mark))
			}
		}
	})
}
