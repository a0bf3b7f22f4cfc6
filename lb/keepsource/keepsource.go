// Package keepsource lets the relays dial an endpoint on this node from the
// client's own address, so the endpoint sees the client as it would behind
// kube-proxy's DNAT (externalTrafficPolicy: Local, a pod's source address
// through a cluster IP).
//
// How: the relay's upstream socket gets IP_TRANSPARENT (IPV6_TRANSPARENT)
// and is bound to the client's address before it connects; a Steering then
// makes the endpoint's replies to that one flow local on the node, where
// the kernel would otherwise forward them towards the client. That works
// only where the replies pass through this node's IP layer: an endpoint on
// this node, routed to from here, or any endpoint for a client that is a
// pod of this node. Keeper.Keeps says which dials qualify.
//
// The package holds the decision and the socket; programming the kernel
// (the policy rules) is the Steering's job, in redirect/replyroute.
package keepsource

import (
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/lb/eventloop"
	"kproxy.dev/kproxy/lb/nodepods"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// Flow is one transparent dial: the socket's local address (the client's
// IP, a port the kernel chose) and the endpoint it connects to.
type Flow struct {
	// Protocol is unix.IPPROTO_TCP or unix.IPPROTO_UDP.
	Protocol uint8
	Local    netip.AddrPort
	Endpoint netip.AddrPort
}

// IsValid says whether f is a flow (the zero Flow is none).
func (f Flow) IsValid() bool { return f.Local.IsValid() }

// Steering makes the replies of one flow (from its Endpoint to its Local
// address) local on the node, and undoes it. It is called from the relays'
// event loops, so it must be safe for concurrent use.
type Steering interface {
	Add(Flow) error
	Remove(Flow) error
}

// View is what decides which dials keep the client's address; a Keeper
// holds one at a time, replaced whole (SetView), never changed in place.
type View struct {
	// Endpoints are the endpoint addresses on this node that may be dialed
	// transparently: pods of this node, not the node's own addresses and
	// not service addresses (which could lead back into kproxy).
	Endpoints map[netip.Addr]bool
	// NodeAddrs are the node's addresses: a client with one is on the
	// node, and a plain dial from the node keeps it well enough.
	NodeAddrs map[netip.Addr]bool
	// OnLink are the prefixes of the node's interfaces. An endpoint and a
	// client in one of them share a link (a bridge of pods): the endpoint
	// answers the client directly, past the node, so such dials stay plain.
	OnLink []netip.Prefix
	// Pods are this node's pods: every other node routes their addresses
	// through this one, so an endpoint anywhere answers them here.
	Pods *nodepods.Set
	// Services are the service addresses, which an endpoint elsewhere must
	// not be (they could lead back into kproxy).
	Services map[netip.Addr]bool
}

// Keeper decides per dial and opens the transparent sockets. A nil *Keeper
// keeps nothing.
type Keeper struct {
	steer Steering
	view  atomic.Pointer[View]
}

// New returns a Keeper that steers replies through s and keeps no address
// until SetView gives it endpoints.
func New(s Steering) *Keeper { return &Keeper{steer: s} }

// SetView replaces the view the next dials are decided by.
func (k *Keeper) SetView(v *View) { k.view.Store(v) }

// Keeps says whether a dial for client to endpoint ep should keep the
// client's address.
func (k *Keeper) Keeps(client, ep netip.Addr) bool {
	if k == nil {
		return false
	}
	v := k.view.Load()
	if v == nil {
		return false
	}
	client, ep = client.Unmap(), ep.Unmap()
	switch {
	case client == ep: // hairpin: the pod must see a peer other than itself
		return false
	case !client.IsGlobalUnicast(), client.Is4() != ep.Is4(): // loopback, link-local, …
		return false
	case v.NodeAddrs[client], v.Services[client]:
		// The node's own connection (to a service address a local portal
		// makes local, its source is that address): masqueraded, as
		// kube-proxy does, by a plain dial.
		return false
	}
	for _, p := range v.OnLink {
		if p.Contains(ep) && p.Contains(client) {
			return false
		}
	}
	if v.Endpoints[ep] {
		return true
	}
	// An endpoint on another node answers through this one only a client
	// this node routes: one of its own pods.
	return !v.NodeAddrs[ep] && !v.Services[ep] && v.Pods.Contains(client)
}

// Open opens the upstream socket of a dial for client to ep, not yet
// connected, as both relays do: one of Socket's when wanted (the service's
// traffic keeps the client's address) and Keeps says the dial qualifies,
// else a plain non-blocking, close-on-exec one from the node's address. A
// transparent socket that cannot be opened falls back to a plain one, with
// the reason in keepErr. Release f once the socket is closed.
func (k *Keeper) Open(wanted bool, typ, proto int, client netip.Addr, ep netip.AddrPort) (fd int, f Flow, keepErr, err error) {
	if wanted && k.Keeps(client, ep.Addr()) {
		if fd, f, keepErr = k.Socket(typ, proto, client, ep); keepErr == nil {
			return fd, f, nil, nil
		}
	}
	if fd, err = eventloop.Socket(ipfamily.Of(ep.Addr()).Domain(), typ, proto); err != nil {
		return -1, Flow{}, keepErr, fmt.Errorf("creating a socket for %v: %w", ep, err)
	}
	return fd, Flow{}, keepErr, nil
}

// Socket opens a non-blocking, close-on-exec socket of typ (SOCK_STREAM or
// SOCK_DGRAM) for proto, bound to client's address on a port the kernel
// picks, with the replies from ep to it steered to it; the caller connects
// it to ep. Release undoes the steering once the socket is closed. On
// error nothing is left open or steered.
func (k *Keeper) Socket(typ, proto int, client netip.Addr, ep netip.AddrPort) (int, Flow, error) {
	client = client.Unmap()
	var bindTo unix.Sockaddr
	var family, level, opt int
	switch {
	case client.Is4():
		family, level, opt = unix.AF_INET, unix.SOL_IP, unix.IP_TRANSPARENT
		bindTo = &unix.SockaddrInet4{Addr: client.As4()}
	case client.Is6():
		family, level, opt = unix.AF_INET6, unix.SOL_IPV6, unix.IPV6_TRANSPARENT
		bindTo = &unix.SockaddrInet6{Addr: client.As16()}
	default:
		return -1, Flow{}, fmt.Errorf("client address %v is not an IP address", client)
	}
	fd, err := unix.Socket(family, typ|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, Flow{}, fmt.Errorf("creating a socket: %w", err)
	}
	fail := func(what string, err error) (int, Flow, error) {
		unix.Close(fd)
		return -1, Flow{}, fmt.Errorf("%s: %w", what, err)
	}
	if err := unix.SetsockoptInt(fd, level, opt, 1); err != nil {
		return fail("setting the transparent option", err)
	}
	// Bound now, not at connect: the port must be known, and its replies
	// steered, before the first packet leaves.
	if err := unix.Bind(fd, bindTo); err != nil {
		return fail(fmt.Sprintf("binding to the client's address %v", client), err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fail("reading the bound port", err)
	}
	var port int
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		port = a.Port
	case *unix.SockaddrInet6:
		port = a.Port
	default:
		return fail("reading the bound port", errors.New("not an IP socket"))
	}
	f := Flow{Protocol: uint8(proto), Local: netip.AddrPortFrom(client, uint16(port)),
		Endpoint: netip.AddrPortFrom(ep.Addr().Unmap(), ep.Port())}
	if err := k.steer.Add(f); err != nil {
		return fail("steering the endpoint's replies", err)
	}
	return fd, f, nil
}

// Release undoes the steering of f (a zero f is none); call it once its
// socket is closed.
func (k *Keeper) Release(f Flow) error {
	if k == nil || !f.IsValid() {
		return nil
	}
	return k.steer.Remove(f)
}
