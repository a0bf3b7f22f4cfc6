package kernel

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"

	"kproxy.dev/kproxy/redirect/sklookup"
	"kproxy.dev/kproxy/sync/sysctl"
)

// System is the netlink and socket surface the probes use. Errors are the
// kernel's own (syscall.Errno, possibly wrapped) so the probes can tell
// "absent" from "broken"; tests substitute fakes returning the same errnos.
type System interface {
	// GenlFamily looks up a generic netlink family by name.
	GenlFamily(name string) error
	// AddDummyLink creates a link of type dummy.
	AddDummyLink(name string) error
	// DeleteLink deletes a link by name.
	DeleteLink(name string) error
	// CreateIPSet creates an IPv4 hash:ip set (kept if it exists);
	// DestroyIPSet destroys one. Both over netlink: no ipset tool.
	CreateIPSet(name string) error
	DestroyIPSet(name string) error
	// ModuleLoaded says whether /sys/module lists the module: loaded, or
	// built in with parameters. Looking never loads it.
	ModuleLoaded(name string) bool
	// ProtocolRegistered says whether /proc/net/protocols lists the
	// protocol ("SCTP"): the kernel has its sockets now, without loading
	// anything.
	ProtocolRegistered(name string) (bool, error)
	// ModuleLoadable says whether the kernel would load the module on
	// demand: module loading is enabled (kernel.modules_disabled is 0) and
	// the running kernel's modules.dep lists it.
	ModuleLoadable(name string) (bool, error)
	// ConntrackStats asks ctnetlink for its global counters: a cheap request
	// that fails when conntrack is not reachable over netlink.
	ConntrackStats() error
	// KernelRelease is uname's release ("6.1.0-13-amd64").
	KernelRelease() (string, error)
	// SKLookup loads the socket-lookup steering and attaches it to the
	// calling thread's network namespace for a moment (sklookup.Probe).
	SKLookup() error
	// IPv6Off says why the kernel will not carry IPv6 in this network
	// namespace (no IPv6 at all, or disabled by sysctl), nil when it will.
	IPv6Off() error
}

// NetlinkSystem is the real System.
type NetlinkSystem struct {
	// Sysctls nil means the kernel's.
	Sysctls sysctl.Sysctls
}

var _ System = NetlinkSystem{}

// GenlFamily implements System.
func (NetlinkSystem) GenlFamily(name string) error {
	_, err := netlink.GenlFamilyGet(name)
	return err
}

// AddDummyLink implements System.
func (NetlinkSystem) AddDummyLink(name string) error {
	return netlink.LinkAdd(&netlink.Dummy{LinkAttrs: netlink.LinkAttrs{Name: name}})
}

// DeleteLink implements System.
func (NetlinkSystem) DeleteLink(name string) error {
	link, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkDel(link)
}

// CreateIPSet implements System.
func (NetlinkSystem) CreateIPSet(name string) error {
	return netlink.IpsetCreate(name, "hash:ip", netlink.IpsetCreateOptions{Family: unix.AF_INET})
}

// DestroyIPSet implements System.
func (NetlinkSystem) DestroyIPSet(name string) error {
	return netlink.IpsetDestroy(name)
}

// ModuleLoaded implements System.
func (NetlinkSystem) ModuleLoaded(name string) bool {
	_, err := os.Stat(filepath.Join("/sys/module", name))
	return err == nil
}

// ProtocolRegistered implements System.
func (NetlinkSystem) ProtocolRegistered(name string) (bool, error) {
	data, err := os.ReadFile("/proc/net/protocols")
	if err != nil {
		return false, err
	}
	return protocolListed(string(data), name), nil
}

// protocolListed says whether a /proc/net/protocols text has a line for
// name (its first column).
func protocolListed(protocols, name string) bool {
	for line := range strings.Lines(protocols) {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return true
		}
	}
	return false
}

// ModuleLoadable implements System.
func (n NetlinkSystem) ModuleLoadable(name string) (bool, error) {
	if v, err := os.ReadFile("/proc/sys/kernel/modules_disabled"); err == nil && strings.TrimSpace(string(v)) == "1" {
		return false, nil
	}
	release, err := n.KernelRelease()
	if err != nil {
		return false, err
	}
	dep, err := os.ReadFile(filepath.Join("/lib/modules", release, "modules.dep"))
	if err != nil {
		return false, err
	}
	return moduleListed(string(dep), name), nil
}

// moduleListed says whether a modules.dep text has the module: a line
// whose path (before the colon) names NAME.ko, compressed or not.
func moduleListed(modulesDep, name string) bool {
	for line := range strings.Lines(modulesDep) {
		path, _, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		file := filepath.Base(path)
		for _, ext := range []string{".ko", ".ko.xz", ".ko.zst", ".ko.gz"} {
			if base, found := strings.CutSuffix(file, ext); found && (base == name || strings.ReplaceAll(base, "-", "_") == name) {
				return true
			}
		}
	}
	return false
}

// ipctnlMsgCtGetStats is IPCTNL_MSG_CT_GET_STATS from
// linux/netfilter/nfnetlink_conntrack.h (not exported by the netlink package).
const ipctnlMsgCtGetStats = 5

// ConntrackStats implements System. Unlike a table dump its cost does not
// grow with the number of tracked connections.
func (NetlinkSystem) ConntrackStats() error {
	// NLM_F_ACK: without it the kernel's reply is not recognised as final and
	// the request waits out the socket timeout.
	req := nl.NewNetlinkRequest(int(netlink.ConntrackTable)<<8|ipctnlMsgCtGetStats, unix.NLM_F_ACK)
	req.AddData(&nl.Nfgenmsg{NfgenFamily: unix.AF_UNSPEC, Version: nl.NFNETLINK_V0})
	if _, err := req.Execute(unix.NETLINK_NETFILTER, 0); err != nil {
		return fmt.Errorf("ctnetlink stats request: %w", err)
	}
	return nil
}

// SKLookup implements System.
func (NetlinkSystem) SKLookup() error { return sklookup.Probe() }

// KernelRelease implements System.
func (NetlinkSystem) KernelRelease() (string, error) {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "", fmt.Errorf("uname: %w", err)
	}
	return unix.ByteSliceToString(u.Release[:]), nil
}

// IPv6Off implements System, as kube-proxy decides whether a node can do
// IPv6: the kernel has it (/proc/net/if_inet6) and it is not disabled.
func (n NetlinkSystem) IPv6Off() error {
	if _, err := os.Stat("/proc/net/if_inet6"); err != nil {
		return fmt.Errorf("the kernel has no IPv6 (%w)", err)
	}
	s := n.Sysctls
	if s == nil {
		s = sysctl.Proc{}
	}
	if v, err := s.Read("net/ipv6/conf/all/disable_ipv6"); err == nil && v == "1" {
		return errors.New("IPv6 is disabled (net.ipv6.conf.all.disable_ipv6=1)")
	}
	return nil
}
