package handles_test

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// The contract tests run one table of calls against a fake and against the
// real kernel and compare how each call ended. An outcome is that ending as
// the mode sees it: the kernel code the error carries and which of the
// handles' classification helpers accept it.
type outcome struct {
	code    string   // "ok", "EEXIST", "IPSET_ERR_EXIST", or "uncoded: <message>"
	classes []string // helpers that accept the error, in a fixed order
}

type classifier struct {
	name string
	is   func(error) bool
}

// classifiers are the helpers the reconciler branches on, plus ENODEV,
// which it tests directly when deleting the link.
func classifiers() []classifier {
	return []classifier{
		{"IsExist", handles.IsExist},
		{"IsNoService", handles.IsNoService},
		{"IsNotFound", handles.IsNotFound},
		{"IsSetMember", handles.IsSetMember},
		{"ErrSetBusy", func(err error) bool { return errors.Is(err, handles.ErrSetBusy) }},
		{"ENODEV", func(err error) bool { return errors.Is(err, syscall.ENODEV) }},
	}
}

func outcomeOf(err error) outcome {
	if err == nil {
		return outcome{code: "ok"}
	}
	o := outcome{code: codeOf(err)}
	for _, c := range classifiers() {
		if c.is(err) {
			o.classes = append(o.classes, c.name)
		}
	}
	return o
}

func (o outcome) String() string {
	if len(o.classes) == 0 {
		return o.code
	}
	return o.code + " (" + strings.Join(o.classes, ", ") + ")"
}

func (o outcome) equal(p outcome) bool { return o.String() == p.String() }

// ipsetErrName names the ipset-private codes the contract can meet.
func ipsetErrName(e nl.IPSetError) string {
	switch e {
	case nl.IPSET_ERR_PROTOCOL:
		return "IPSET_ERR_PROTOCOL"
	case nl.IPSET_ERR_FIND_TYPE:
		return "IPSET_ERR_FIND_TYPE"
	case nl.IPSET_ERR_BUSY:
		return "IPSET_ERR_BUSY"
	case nl.IPSET_ERR_TYPE_MISMATCH:
		return "IPSET_ERR_TYPE_MISMATCH"
	case nl.IPSET_ERR_EXIST:
		return "IPSET_ERR_EXIST"
	case nl.IPSET_ERR_INVALID_CIDR:
		return "IPSET_ERR_INVALID_CIDR"
	case nl.IPSET_ERR_INVALID_FAMILY:
		return "IPSET_ERR_INVALID_FAMILY"
	case nl.IPSET_ERR_IPADDR_IPV4:
		return "IPSET_ERR_IPADDR_IPV4"
	case nl.IPSET_ERR_IPADDR_IPV6:
		return "IPSET_ERR_IPADDR_IPV6"
	}
	return fmt.Sprintf("IPSET_ERR_%d", uintptr(e))
}

// codeOf names the kernel code err carries, however it is wrapped.
func codeOf(err error) string {
	var setErr nl.IPSetError
	if errors.As(err, &setErr) {
		return ipsetErrName(setErr)
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if errno >= nl.IPSET_ERR_PRIVATE {
			// An ipset code the netlink package left unconverted.
			return codeOf(nl.IPSetError(errno))
		}
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
		return fmt.Sprintf("errno %d", uintptr(errno))
	}
	return "uncoded: " + err.Error()
}
