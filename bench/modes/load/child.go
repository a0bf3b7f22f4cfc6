package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"regexp"
	"strings"
	"syscall"
	"time"

	"kproxy.dev/kproxy/bench/dataplane"
	"kproxy.dev/kproxy/bench/lab"
)

// childArg makes a test binary that calls ChildMain run the new-UDP-flow
// client: target, duration, comma-separated source addresses.
const childArg = "kproxy-load-udp-flows"

// zeroRequests matches wrk's summary of a run in which no request
// completed (it then prints no percentiles).
var zeroRequests = regexp.MustCompile(`(?m)^\s*0 requests in `)

// ChildMain must be called first thing from TestMain of any test binary
// that uses load: when the binary was re-executed as the new-UDP-flow
// client (a process of its own in the client's namespace), it runs it,
// prints the result and exits; otherwise it returns. A benchmark program's
// main may call it the same way.
func ChildMain() {
	if len(os.Args) < 2 || os.Args[1] != childArg {
		return
	}
	if err := runFlowClient(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "new UDP flows: %v\n", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// flowArgs are the flow client's command line (after the binary).
func flowArgs(to netip.AddrPort, d time.Duration, sources []netip.Addr) []string {
	var s []string
	for _, a := range sources {
		s = append(s, a.String())
	}
	return []string{childArg, to.String(), d.String(), strings.Join(s, ",")}
}

// parseFlowArgs reads flowArgs' arguments after childArg.
func parseFlowArgs(args []string) (dataplane.UDPFlowsOptions, error) {
	if len(args) != 3 {
		return dataplane.UDPFlowsOptions{}, fmt.Errorf("want target duration sources, got %q", args)
	}
	target, err := netip.ParseAddrPort(args[0])
	if err != nil {
		return dataplane.UDPFlowsOptions{}, fmt.Errorf("target: %w", err)
	}
	d, err := time.ParseDuration(args[1])
	if err != nil || d <= 0 {
		return dataplane.UDPFlowsOptions{}, fmt.Errorf("duration %q: want a positive duration", args[1])
	}
	var sources []netip.Addr
	for _, s := range strings.Split(args[2], ",") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return dataplane.UDPFlowsOptions{}, fmt.Errorf("source: %w", err)
		}
		sources = append(sources, a)
	}
	return dataplane.UDPFlowsOptions{
		Target: target, Sources: sources, PortLo: udpFlowPortLo, PortHi: udpFlowPortHi,
		Workers: udpFlowWorkers, Duration: d, Payload: udpPayload, Timeout: udpFlowTimeout,
	}, nil
}

func runFlowClient(args []string) error {
	opts, err := parseFlowArgs(args)
	if err != nil {
		return err
	}
	res, err := dataplane.RunUDPFlows(context.Background(), opts)
	if err != nil {
		return err
	}
	fmt.Println(res)
	return nil
}

// errOverran is runCommand's error for a process it killed at its limit.
var errOverran = errors.New("killed: still running after its run")

// runCommand runs name on h and returns its standard output. It is killed
// (its process group) when ctx ends or after limit; a failure wraps its
// output.
func runCommand(ctx context.Context, h *lab.Host, limit time.Duration, name string, args ...string) (string, error) {
	cmd := h.Command(name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// `ip netns exec` execs the program: the group is the load generator.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("starting %s on %s: %w", name, h, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	var why error
	select {
	case err := <-done:
		if err != nil {
			return stdout.String(), fmt.Errorf("%s on %s: %w\n%s", name, h, err, clip(stderr.String()+stdout.String()))
		}
		return stdout.String(), nil
	case <-ctx.Done():
		why = fmt.Errorf("stopped: %w", context.Cause(ctx))
	case <-timer.C:
		why = fmt.Errorf("%w, at %v", errOverran, limit)
	}
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
	return stdout.String(), fmt.Errorf("%s on %s: %w\n%s", name, h, why, clip(stderr.String()+stdout.String()))
}
