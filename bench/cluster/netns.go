package cluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

const ipProgram = "ip"

// InNetns runs fn on a thread moved into the network namespace at path, and
// moves the thread back. Sockets fn opens stay in that namespace. fn must not
// hand work to other goroutines expecting the namespace.
func InNetns(path string, fn func() error) error {
	target, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening network namespace: %w", err)
	}
	defer target.Close()
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("opening this thread's network namespace: %w", err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("entering %s: %w", path, err)
	}
	fnErr := fn()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked and dies with its goroutine: it must not
		// run anything else in the wrong namespace.
		return errors.Join(fnErr, fmt.Errorf("leaving %s: %w", path, err))
	}
	runtime.UnlockOSThread()
	return fnErr
}

// DialIn connects to addr from inside the network namespace at path.
func DialIn(ctx context.Context, path, network, addr string) (net.Conn, error) {
	var conn net.Conn
	err := InNetns(path, func() error {
		var d net.Dialer
		c, err := d.DialContext(ctx, network, addr)
		conn = c
		return err
	})
	return conn, err
}

// writeSysctls sets /proc/sys values (keys as paths under /proc/sys) in the
// namespace at path.
func writeSysctls(path string, values map[string]string) error {
	return InNetns(path, func() error {
		for k, v := range values {
			if err := os.WriteFile(filepath.Join("/proc/sys", k), []byte(v), 0o644); err != nil {
				return fmt.Errorf("setting %s: %w", k, err)
			}
		}
		return nil
	})
}

// forwarding makes a namespace route, and not redirect: a node that sends a
// packet back out of the link it came in by would otherwise tell the sender
// to bypass it, and its NAT with it.
func forwarding() map[string]string {
	return map[string]string{
		"net/ipv4/ip_forward":                    "1",
		"net/ipv4/conf/all/send_redirects":       "0",
		"net/ipv4/conf/default/send_redirects":   "0",
		"net/ipv4/conf/all/accept_redirects":     "0",
		"net/ipv4/conf/default/accept_redirects": "0",
	}
}

// ip runs the ip tool.
func ip(args ...string) error {
	out, err := exec.Command(ipProgram, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// buildNetwork makes the router and node namespaces and links them.
func buildNetwork(nodes []Node) error {
	r := routerNetns
	steps := [][]string{
		{"netns", "add", r},
		{"-n", r, "link", "set", "lo", "up"},
		{"-n", r, "link", "add", "br-nodes", "type", "bridge"},
		{"-n", r, "addr", "add", RouterIP + "/24", "dev", "br-nodes"},
		{"-n", r, "link", "set", "br-nodes", "up"},
	}
	for _, n := range nodes {
		veth := fmt.Sprintf("veth-n%d", n.Index)
		steps = append(steps,
			[]string{"netns", "add", n.Netns},
			[]string{"-n", n.Netns, "link", "set", "lo", "up"},
			[]string{"-n", r, "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", n.Netns},
			[]string{"-n", r, "link", "set", veth, "master", "br-nodes", "up"},
			[]string{"-n", n.Netns, "addr", "add", n.IP.String() + "/24", "dev", "eth0"},
			[]string{"-n", n.Netns, "link", "set", "eth0", "up"},
			[]string{"-n", n.Netns, "route", "add", "default", "via", RouterIP},
			[]string{"-n", r, "route", "add", n.PodCIDR.String(), "via", n.IP.String()},
		)
		// Pod traffic between nodes goes straight to the other node.
		for _, o := range nodes {
			if o.Index != n.Index {
				steps = append(steps, []string{"-n", n.Netns, "route", "add", o.PodCIDR.String(), "via", o.IP.String()})
			}
		}
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	if err := writeSysctls(RouterNetnsPath(), forwarding()); err != nil {
		return fmt.Errorf("router: %w", err)
	}
	for _, n := range nodes {
		if err := writeSysctls(NetnsPath(n.Netns), forwarding()); err != nil {
			return fmt.Errorf("%s: %w", n.Name, err)
		}
	}
	return nil
}

// clusterNetns lists the namespaces a cluster (any size) left in /run/netns.
func clusterNetns() ([]string, error) {
	entries, err := os.ReadDir("/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("listing network namespaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), netnsPrefix) {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// removeNetwork deletes every cluster namespace; their links go with them.
func removeNetwork() error {
	names, err := clusterNetns()
	if err != nil {
		return err
	}
	var errs []error
	for _, name := range names {
		if err := ip("netns", "del", name); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
