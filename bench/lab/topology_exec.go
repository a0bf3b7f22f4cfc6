package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// InNetns runs fn on an OS thread switched into the host's network namespace
// and waits for it. Sockets fn creates stay in that namespace for their whole
// life, whichever goroutine uses them afterwards, so
//
//	var conn net.Conn
//	err := client.InNetns(func() (err error) { conn, err = net.Dial("tcp", "198.18.0.10:80"); return })
//
// gives a connection from the client host. Only fn's own goroutine is in the
// namespace: goroutines it starts are not (net.Dial of an IP literal stays on
// the calling goroutine; a hostname with several addresses would not). fn
// must not call t.FailNow/t.Fatal (that is reported as an error instead); a
// panic in fn is re-raised in the caller. For the node, fn just runs.
func (h *Host) InNetns(fn func() error) error {
	if h.Netns == "" {
		return fn()
	}
	type result struct {
		err      error
		panicked any
	}
	done := make(chan result, 1)
	go func() {
		// The thread is unlocked only after it is back in its own namespace;
		// if restoring fails it stays locked, and the runtime ends the thread
		// when this goroutine returns instead of reusing it elsewhere.
		runtime.LockOSThread()
		var res result
		returned := false
		defer func() {
			if !returned {
				if r := recover(); r != nil {
					res.panicked = r
				} else if res.err == nil {
					res.err = errors.New("the function run in " + h.String() + " exited its goroutine (t.FailNow or runtime.Goexit?)")
				}
			}
			done <- res
		}()
		restore, err := enterNetns(filepath.Join(netnsDir, h.Netns))
		if err != nil {
			res.err = fmt.Errorf("entering %s: %w", h, err)
			returned = true
			return
		}
		defer func() {
			if err := restore(); err != nil {
				res.err = errors.Join(res.err, fmt.Errorf("returning from %s: %w", h, err))
				return
			}
			runtime.UnlockOSThread()
		}()
		res.err = fn()
		returned = true
	}()
	res := <-done
	if res.panicked != nil {
		panic(res.panicked)
	}
	return res.err
}

// enterNetns switches the calling (locked) thread into the namespace at path
// and returns how to switch it back.
func enterNetns(path string) (restore func() error, err error) {
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		return nil, fmt.Errorf("opening the current namespace: %w", err)
	}
	target, err := os.Open(path)
	if err != nil {
		orig.Close()
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		orig.Close()
		return nil, fmt.Errorf("setns %s: %w", path, err)
	}
	return func() error {
		defer orig.Close()
		if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns back to the original namespace: %w", err)
		}
		return nil
	}, nil
}

// DialContext dials from the host (see net.Dialer.DialContext); address must
// hold an IP literal, not a name.
func (h *Host) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	var conn net.Conn
	err := h.InNetns(func() (err error) {
		var d net.Dialer
		conn, err = d.DialContext(ctx, network, address)
		return err
	})
	return conn, err
}

// Dial dials from the host with a 10 s timeout.
func (h *Host) Dial(network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return h.DialContext(ctx, network, address)
}

// Listen opens a stream listener on the host.
func (h *Host) Listen(network, address string) (net.Listener, error) {
	var ln net.Listener
	err := h.InNetns(func() (err error) {
		ln, err = net.Listen(network, address)
		return err
	})
	return ln, err
}

// ListenPacket opens a packet socket on the host (use "udp" with a port 0
// address for a client socket, then WriteTo).
func (h *Host) ListenPacket(network, address string) (net.PacketConn, error) {
	var pc net.PacketConn
	err := h.InNetns(func() (err error) {
		pc, err = net.ListenPacket(network, address)
		return err
	})
	return pc, err
}

// HTTPClient returns an HTTP client whose connections are dialled from the
// host (URLs must use IP literals). Keep-alive is on; close idle connections
// with CloseIdleConnections when done.
func (h *Host) HTTPClient() *http.Client {
	return &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{
			DialContext:         h.DialContext,
			MaxIdleConnsPerHost: 64,
			DisableCompression:  true,
		},
	}
}

// WaitListening waits until a socket listens on port in the host's namespace
// ("tcp": a TCP listener; "udp": a bound UDP socket), over IPv4 or IPv6. It
// reads the namespace's /proc/net tables rather than probing, so servers that
// log or count every connection (iperf3) see none. stop, if not nil, aborts
// the wait when it is closed (a server that exited).
func (h *Host) WaitListening(network string, port int, timeout time.Duration, stop <-chan struct{}) error {
	var tables []string
	switch network {
	case "tcp":
		tables = []string{"tcp", "tcp6"}
	case "udp":
		tables = []string{"udp", "udp6"}
	default:
		return fmt.Errorf("WaitListening: network %q, want tcp or udp", network)
	}
	deadline := time.Now().Add(timeout)
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		var found bool
		err := h.InNetns(func() error {
			for _, table := range tables {
				ok, err := listeningIn("/proc/thread-self/net/"+table, port, network == "tcp")
				if err != nil {
					return err
				}
				if ok {
					found = true
					return nil
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		if found {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("nothing listens on %s port %d on %s after %v", network, port, h, timeout)
		}
		select {
		case <-stop:
			return fmt.Errorf("gave up waiting for %s port %d on %s: the server exited", network, port, h)
		case <-time.After(delay):
		}
	}
}

// listeningIn reports whether a /proc/net/{tcp,udp}[6] table has a socket on
// the local port (for TCP, one in LISTEN state).
func listeningIn(path string, port int, tcp bool) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil // e.g. tcp6 without IPv6
	}
	if err != nil {
		return false, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	want := fmt.Sprintf(":%04X", port)
	sc := bufio.NewScanner(f)
	sc.Scan() // header
	for sc.Scan() {
		// sl local_address rem_address st ...
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasSuffix(fields[1], want) {
			continue
		}
		if !tcp || fields[3] == "0A" { // 0A: TCP_LISTEN
			return true, nil
		}
	}
	return false, sc.Err()
}

// Process is a long-running command started on a host with Host.Start.
type Process struct {
	// Name is the command's base name, for messages.
	Name string
	// Host is where it runs.
	Host *Host
	// LogPath holds its stdout and stderr.
	LogPath string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error // valid once exited is closed
}

// Start starts a long-running command in the host's namespace with its
// output in a file under the test's TempDir. The process is stopped (SIGTERM,
// then SIGKILL to its whole process group) when the test that built the
// topology ends, before the topology is removed, and its log tail is printed
// if the test failed. It is also killed if the test process dies.
func (h *Host) Start(name string, args ...string) *Process {
	h.topo.t.Helper()
	return h.StartFor(h.topo.t, name, args...)
}

// StartFor is Start for a process that belongs to t, a subtest (or the
// test) of the one that built the topology: it is stopped when t ends.
func (h *Host) StartFor(t testing.TB, name string, args ...string) *Process {
	t.Helper()
	p, err := h.start(name, args...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Stop(); err != nil {
			t.Logf("stopping %s: %v", p, err)
		}
		if t.Failed() {
			t.Logf("log of %s (%s), last lines:\n%s", p, p.LogPath, tail(p.LogPath))
		}
	})
	return p
}

func (h *Host) start(name string, args ...string) (*Process, error) {
	f, err := os.CreateTemp(h.topo.logDir, h.Name+"-"+filepath.Base(name)+"-*.log")
	if err != nil {
		return nil, fmt.Errorf("creating a log file for %s: %w", name, err)
	}
	defer f.Close() // the child holds its own descriptor
	cmd := h.Command(name, args...)
	fmt.Fprintf(f, "=== %s on %s: %s\n", time.Now().Format(time.RFC3339Nano), h, strings.Join(cmd.Args, " "))
	cmd.Stdout, cmd.Stderr = f, f
	// Own process group, so Stop reaches children too; Pdeathsig, so a
	// test process killed outright does not leave servers behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s on %s: %w", strings.Join(cmd.Args, " "), h, err)
	}
	p := &Process{Name: filepath.Base(name), Host: h, LogPath: f.Name(), cmd: cmd, exited: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *Process) String() string {
	return fmt.Sprintf("%s (pid %d) on %s", p.Name, p.Pid(), p.Host.Name)
}

// Pid is the process id (the command itself: `ip netns exec` execs it).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Exited is closed when the process has exited.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Err is the process's exit error (nil for status 0); valid after Exited.
func (p *Process) Err() error {
	select {
	case <-p.exited:
		return p.err
	default:
		return errors.New(p.String() + " is still running")
	}
}

// Log returns everything the process has written so far.
func (p *Process) Log() string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.LogPath, err)
	}
	return string(data)
}

// WaitListening waits until the process's host listens on port, failing
// early with the log if the process exits first.
func (p *Process) WaitListening(network string, port int, timeout time.Duration) error {
	if err := p.Host.WaitListening(network, port, timeout, p.exited); err != nil {
		return fmt.Errorf("%s: %w; its log:\n%s", p, err, indent([]byte(p.Log())))
	}
	return nil
}

// Kill sends SIGKILL to the process group, as a crash or an OOM kill ends
// a process with no chance to clean up, and waits for it to exit.
func (p *Process) Kill() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	if err := syscall.Kill(-p.Pid(), syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing process group %d: %w", p.Pid(), err)
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("%s did not exit within %v of SIGKILL", p, stopTimeout)
	}
}

// Stop sends SIGTERM to the process group, waits up to 5 s, then SIGKILLs
// it. Stopping an exited process is a no-op; Stop is safe to call twice.
func (p *Process) Stop() error {
	select {
	case <-p.exited:
		return nil
	default:
	}
	pgid := p.Pid()
	if err := syscall.Kill(-pgid, syscall.SIGTERM); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("signalling process group %d: %w", pgid, err)
	}
	select {
	case <-p.exited:
		// The group may still hold children that ignored SIGTERM.
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		return nil
	case <-time.After(stopTimeout):
	}
	if err := syscall.Kill(-pgid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("killing process group %d: %w", pgid, err)
	}
	<-p.exited
	return nil
}

// ExitCode is the exit status after Exited, or -1.
func (p *Process) ExitCode() int {
	select {
	case <-p.exited:
		return p.cmd.ProcessState.ExitCode()
	default:
		return -1
	}
}
