// Package nfacct creates and reads the kernel's extended packet accounting
// objects (nfnetlink_acct), over netfilter netlink. kube-proxy's iptables
// mode counts two things in them, through `-m nfacct --nfacct-name` rules:
// packets dropped as conntrack INVALID, and packets accepted on IPv4
// loopback NodePorts; its metrics read the objects back.
package nfacct

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// The nfnetlink_acct message types and attributes
// (linux/netfilter/nfnetlink_acct.h), which x/sys/unix does not define.
const (
	subsysAcct = 7 // NFNL_SUBSYS_ACCT
	msgNew     = 0 // NFNL_MSG_ACCT_NEW
	msgGet     = 1 // NFNL_MSG_ACCT_GET
	attrName   = 1 // NFACCT_NAME
	attrPkts   = 2 // NFACCT_PKTS
	attrBytes  = 3 // NFACCT_BYTES
	// NameMax is NFACCT_NAME_MAX, the terminating NUL included.
	NameMax = 32
)

// The objects kube-proxy's iptables mode counts in, by the names its rules
// and metrics use.
const (
	CTStateInvalidDropped   = "ct_state_invalid_dropped_pkts"
	LocalhostNodePortAccept = "localhost_nps_accepted_pkts"
)

// Counter is one object's counts.
type Counter struct {
	Name           string
	Packets, Bytes uint64
}

// Client is the surface the iptables mode needs; Netlink is the real one.
type Client interface {
	// Ensure creates the object if it does not exist.
	Ensure(name string) error
	// Get reads an object.
	Get(name string) (Counter, error)
}

// Netlink talks to the kernel of the caller's network namespace.
type Netlink struct{}

// ErrUnsupported: the kernel has no nfnetlink_acct.
var ErrUnsupported = errors.New("the kernel has no extended packet accounting (nfnetlink_acct)")

func request(msgType, flags int, name string) (*nl.NetlinkRequest, error) {
	if name == "" || len(name) >= NameMax {
		return nil, fmt.Errorf("nfacct object name %q: want 1 to %d bytes", name, NameMax-1)
	}
	req := nl.NewNetlinkRequest(subsysAcct<<8|msgType, flags)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
	req.AddData(nl.NewRtAttr(attrName, append([]byte(name), 0)))
	return req, nil
}

// Ensure creates name; an existing object (EEXIST, or EBUSY while rules use
// it) is left as it is, counts included.
func (Netlink) Ensure(name string) error {
	req, err := request(msgNew, unix.NLM_F_CREATE|unix.NLM_F_EXCL|unix.NLM_F_ACK, name)
	if err != nil {
		return err
	}
	_, err = req.Execute(unix.NETLINK_NETFILTER, 0)
	switch {
	case err == nil, errors.Is(err, unix.EEXIST), errors.Is(err, unix.EBUSY):
		return nil
	case unsupported(err):
		return ErrUnsupported
	}
	return fmt.Errorf("creating nfacct object %s: %w", name, err)
}

// Get reads name's counts.
func (Netlink) Get(name string) (Counter, error) {
	req, err := request(msgGet, unix.NLM_F_ACK, name)
	if err != nil {
		return Counter{}, err
	}
	msgs, err := req.Execute(unix.NETLINK_NETFILTER, 0)
	if unsupported(err) {
		return Counter{}, ErrUnsupported
	}
	if err != nil {
		return Counter{}, fmt.Errorf("reading nfacct object %s: %w", name, err)
	}
	for _, msg := range msgs {
		if c, ok, err := parse(msg); err != nil || ok {
			return c, err
		}
	}
	return Counter{}, fmt.Errorf("reading nfacct object %s: the kernel answered without it", name)
}

// parse reads one NFNL_MSG_ACCT_NEW payload (after the netlink header).
func parse(msg []byte) (Counter, bool, error) {
	if len(msg) < nl.SizeofNfgenmsg {
		return Counter{}, false, nil
	}
	attrs, err := nl.ParseRouteAttr(msg[nl.SizeofNfgenmsg:])
	if err != nil {
		return Counter{}, false, fmt.Errorf("reading an nfacct object: %w", err)
	}
	var c Counter
	var named bool
	for _, a := range attrs {
		switch a.Attr.Type & nl.NLA_TYPE_MASK {
		case attrName:
			c.Name, named = string(trimNUL(a.Value)), true
		case attrPkts:
			if len(a.Value) == 8 {
				c.Packets = binary.BigEndian.Uint64(a.Value)
			}
		case attrBytes:
			if len(a.Value) == 8 {
				c.Bytes = binary.BigEndian.Uint64(a.Value)
			}
		}
	}
	return c, named, nil
}

func trimNUL(b []byte) []byte {
	for i, c := range b {
		if c == 0 {
			return b[:i]
		}
	}
	return b
}

// unsupported tells a kernel without nfnetlink_acct (no such subsystem:
// EINVAL or EOPNOTSUPP from nfnetlink, EPROTONOSUPPORT without nfnetlink).
func unsupported(err error) bool {
	return errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EINVAL)
}
