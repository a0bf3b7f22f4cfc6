package nftcompare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ProxyNetns is a named network namespace (`ip netns`) one proxy runs in:
// loopback up, an interface with the scenario's host addresses, and a
// relay on its loopback to the lab API server, which listens on the test
// namespace's loopback only. Both proxies see the same addresses and the
// same API server URL, each in a namespace of its own, so their nftables
// tables cannot mix.
type ProxyNetns struct {
	Name    string
	relay   net.Listener
	wg      sync.WaitGroup
	proc    *exec.Cmd
	exited  chan struct{}
	procErr error
	LogPath string
}

// NewProxyNetns creates the namespace, its addresses and the relay from
// apiAddr (host:port on the test's loopback) to the same address inside it.
func NewProxyNetns(name, apiAddr string, hostAddrs []string) (*ProxyNetns, error) {
	_ = exec.Command("ip", "netns", "del", name).Run() // a leftover of a killed run
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", name, err, out)
	}
	ns := &ProxyNetns{Name: name}
	cmds := [][]string{
		{"ip", "link", "set", "lo", "up"},
		// A veth pair with both ends here: dummy links need a module the
		// machine may lack.
		{"ip", "link", "add", "eth0", "type", "veth", "peer", "name", "eth1"},
		{"ip", "link", "set", "eth1", "up"},
		{"ip", "link", "set", "eth0", "up"},
	}
	for _, a := range hostAddrs {
		args := []string{"ip", "addr", "add", a, "dev", "eth0"}
		if strings.Contains(a, ":") {
			args = append(args, "nodad")
		}
		cmds = append(cmds, args)
	}
	for _, c := range cmds {
		if out, err := ns.Command(c[0], c[1:]...).CombinedOutput(); err != nil {
			ns.Close()
			return nil, fmt.Errorf("in %s: %s: %v: %s", name, strings.Join(c, " "), err, out)
		}
	}
	if err := ns.startRelay(apiAddr); err != nil {
		ns.Close()
		return nil, err
	}
	return ns, nil
}

// Command is a command run in the namespace.
func (ns *ProxyNetns) Command(name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", ns.Name, name}, args...)...)
}

// startRelay listens on apiAddr inside the namespace and copies each
// connection to apiAddr in the test's namespace.
func (ns *ProxyNetns) startRelay(apiAddr string) error {
	ln, err := ns.listen(apiAddr)
	if err != nil {
		return fmt.Errorf("relay to the API server in %s: %w", ns.Name, err)
	}
	ns.relay = ln
	ns.wg.Go(func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			ns.wg.Go(func() {
				defer in.Close()
				out, err := net.Dial("tcp", apiAddr)
				if err != nil {
					return
				}
				defer out.Close()
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(out, in); done <- struct{}{} }()
				go func() { _, _ = io.Copy(in, out); done <- struct{}{} }()
				<-done
			})
		}
	})
	return nil
}

// listen opens a TCP listener inside the namespace: a socket belongs to the
// namespace of the thread that created it.
func (ns *ProxyNetns) listen(addr string) (net.Listener, error) {
	type result struct {
		ln  net.Listener
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Unlocked only once back home; a thread that cannot return dies
		// with this goroutine instead of serving others in the wrong
		// namespace.
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			done <- result{err: err}
			return
		}
		defer orig.Close()
		target, err := os.Open("/var/run/netns/" + ns.Name)
		if err != nil {
			done <- result{err: err}
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- result{err: fmt.Errorf("setns: %w", err)}
			return
		}
		ln, err := net.Listen("tcp", addr)
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			if ln != nil {
				ln.Close()
			}
			done <- result{err: fmt.Errorf("setns back: %w", err)}
			return
		}
		runtime.UnlockOSThread()
		done <- result{ln, err}
	}()
	r := <-done
	return r.ln, r.err
}

// Start runs a proxy in the namespace, its output in logPath.
func (ns *ProxyNetns) Start(logPath, bin string, args ...string) error {
	f, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer f.Close()
	cmd := ns.Command(bin, args...)
	fmt.Fprintf(f, "=== %s in %s: %s\n", time.Now().Format(time.RFC3339Nano), ns.Name, strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s in %s: %w", bin, ns.Name, err)
	}
	ns.proc, ns.LogPath, ns.exited = cmd, logPath, make(chan struct{})
	go func() {
		ns.procErr = cmd.Wait()
		close(ns.exited)
	}()
	return nil
}

// Exited is closed when the proxy has exited (never, before Start).
func (ns *ProxyNetns) Exited() <-chan struct{} { return ns.exited }

// ExitErr is how the proxy exited; valid after Exited.
func (ns *ProxyNetns) ExitErr() error { return ns.procErr }

// Log is what the proxy wrote so far.
func (ns *ProxyNetns) Log() string {
	if ns.LogPath == "" {
		return ""
	}
	b, err := os.ReadFile(ns.LogPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", ns.LogPath, err)
	}
	return string(b)
}

// ListTable returns `nft list table <family> kube-proxy` inside the
// namespace; a missing table is an error.
func (ns *ProxyNetns) ListTable(ctx context.Context, family string) (string, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns.Name, "nft", "list", "table", family, "kube-proxy").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("nft list table %s kube-proxy in %s: %v: %s", family, ns.Name, err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Close stops the proxy (SIGTERM to its group, SIGKILL after 5 s), the
// relay, and deletes the namespace.
func (ns *ProxyNetns) Close() error {
	var errs []error
	if ns.proc != nil {
		pgid := ns.proc.Process.Pid
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-ns.exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-pgid, syscall.SIGKILL)
			<-ns.exited
		}
		_ = syscall.Kill(-pgid, syscall.SIGKILL) // children that ignored SIGTERM
	}
	if ns.relay != nil {
		ns.relay.Close()
	}
	if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", ns.Name, err, out))
	}
	// Relayed connections end when the namespace's sockets go.
	ns.wg.Wait()
	return errors.Join(errs...)
}
