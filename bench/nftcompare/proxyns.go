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
	"strconv"
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
	bin     string
	args    []string
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
	if ns.proc != nil {
		return fmt.Errorf("%s already runs a proxy", ns.Name)
	}
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
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
	exited := make(chan struct{})
	ns.proc, ns.LogPath, ns.exited, ns.bin, ns.args = cmd, logPath, exited, bin, args
	go func() {
		ns.procErr = cmd.Wait()
		close(exited)
	}()
	return nil
}

// Restart stops the proxy and starts it again with the same arguments,
// appending to the same log; the namespace (and its tables) stay.
func (ns *ProxyNetns) Restart() error {
	if ns.proc == nil {
		return fmt.Errorf("%s runs no proxy", ns.Name)
	}
	ns.stop()
	return ns.Start(ns.LogPath, ns.bin, ns.args...)
}

// stop ends the proxy: SIGTERM to its process group, SIGKILL after 5 s.
func (ns *ProxyNetns) stop() {
	if ns.proc == nil {
		return
	}
	pgid := ns.proc.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-ns.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-ns.exited
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL) // children that ignored SIGTERM
	ns.proc = nil
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
	ns.stop()
	if ns.relay != nil {
		ns.relay.Close()
	}
	if out, err := exec.Command("ip", "netns", "del", ns.Name).CombinedOutput(); err != nil {
		errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", ns.Name, err, out))
	}
	// Relayed connections end when the proxy's sockets go.
	done := make(chan struct{})
	go func() { ns.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		errs = append(errs, fmt.Errorf("relay connections in %s still open 10 s after the proxy stopped", ns.Name))
	}
	return errors.Join(errs...)
}

// ListeningTCPPorts returns the TCP ports something listens on in the
// namespace (`ss -Hltn`).
func (ns *ProxyNetns) ListeningTCPPorts(ctx context.Context) (map[int]bool, error) {
	out, err := exec.CommandContext(ctx, "ip", "netns", "exec", ns.Name, "ss", "-Hltn").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("ss -Hltn in %s: %v: %s", ns.Name, err, out)
	}
	ports := map[int]bool{}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) < 4 {
			continue
		}
		local := f[3] // State Recv-Q Send-Q Local:Port Peer:Port
		if i := strings.LastIndex(local, ":"); i >= 0 {
			if p, err := strconv.Atoi(local[i+1:]); err == nil {
				ports[p] = true
			}
		}
	}
	return ports, nil
}

// NetnsPrefix starts the name of every namespace the test creates:
// nftc-<pid of the test process>-<scenario>-<run>.
const NetnsPrefix = "nftc-"

// SweepStaleNetns deletes the namespaces of test processes that died
// without removing theirs (a killed `go test`).
func SweepStaleNetns() error {
	entries, err := os.ReadDir("/var/run/netns")
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), NetnsPrefix)
		if !ok {
			continue
		}
		pid, _, _ := strings.Cut(rest, "-")
		if _, err := strconv.Atoi(pid); err != nil {
			continue
		}
		if _, err := os.Stat("/proc/" + pid); err == nil {
			continue // its test still runs
		}
		if out, err := exec.Command("ip", "netns", "del", e.Name()).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("ip netns del %s: %v: %s", e.Name(), err, out))
		}
	}
	return errors.Join(errs...)
}
