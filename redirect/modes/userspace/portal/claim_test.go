package portal

import (
	"errors"
	"io"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/servicemap"
)

// fakeOpener records open sockets and refuses ports listed as taken.
type fakeOpener struct {
	taken map[uint16]bool
	open  map[uint16]int // port -> open sockets
	opens int
}

type fakeSocket struct {
	o    *fakeOpener
	port uint16
}

func (s fakeSocket) Close() error { s.o.open[s.port]--; return nil }

func (o *fakeOpener) Open(c Claim) (io.Closer, error) {
	if o.taken[c.Port] {
		return nil, errors.New("bind: address already in use")
	}
	o.opens++
	o.open[c.Port]++
	return fakeSocket{o, c.Port}, nil
}

func spn(ns, name, port string, proto v1.Protocol) servicemap.ServicePortName {
	return servicemap.ServicePortName{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}, Port: port, Protocol: proto}
}

func TestClaimerSync(t *testing.T) {
	o := &fakeOpener{taken: map[uint16]bool{30099: true}, open: map[uint16]int{}}
	c := NewClaimer(o)
	a, b := spn("default", "a", "http", v1.ProtocolTCP), spn("default", "b", "http", v1.ProtocolTCP)
	claim := func(port uint16, owner servicemap.ServicePortName) Claim {
		return Claim{Family: ipfamily.IPv4, Protocol: v1.ProtocolTCP, Port: port, Owner: owner}
	}

	err := c.Sync([]Claim{claim(30080, a), claim(30080, b), claim(30099, b), claim(30081, b)})
	if err == nil {
		t.Fatal("conflicting claims were accepted")
	}
	msg := err.Error()
	if !strings.Contains(msg, "service port default/b:http/TCP: TCP port 0.0.0.0:30080 is already used by service port default/a:http/TCP") {
		t.Errorf("the duplicate is not reported with both owners: %v", err)
	}
	if !strings.Contains(msg, "default/b:http/TCP: cannot claim TCP port 0.0.0.0:30099") {
		t.Errorf("the port taken by another process is not reported: %v", err)
	}
	if o.open[30080] != 1 || o.open[30081] != 1 || o.open[30099] != 0 {
		t.Errorf("open sockets %v, want one each for 30080 and 30081", o.open)
	}

	// 30080 changes hands: no close and reopen, which would let another
	// process grab the port in between.
	opens := o.opens
	if err := c.Sync([]Claim{claim(30080, b)}); err != nil {
		t.Fatal(err)
	}
	if o.opens != opens || o.open[30080] != 1 {
		t.Errorf("the handed-over claim was reopened (opens %d -> %d)", opens, o.opens)
	}
	if o.open[30081] != 0 {
		t.Error("the claim no longer wanted was not released")
	}
	if held := c.Held(); len(held) != 1 || held[0].Owner != b {
		t.Errorf("Held = %v, want 30080 owned by default/b", held)
	}
	if err := c.Close(); err != nil || o.open[30080] != 0 {
		t.Errorf("Close: %v, open %v", err, o.open)
	}
}
