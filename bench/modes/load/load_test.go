package load

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"kproxy.dev/kproxy/bench/dataplane"
	"kproxy.dev/kproxy/bench/lab"
)

func TestMain(m *testing.M) {
	ChildMain()
	os.Exit(m.Run())
}

func TestWorkloadsMatchTheResultsSchema(t *testing.T) {
	// bench/modes' Workload* strings, which load cannot import.
	want := []string{"keepalive", "newconn", "udp-rr", "udp-flows"}
	if got := Workloads(); !slices.Equal(got, want) {
		t.Errorf("Workloads() = %q, want %q", got, want)
	}
}

func TestCPUPerOp(t *testing.T) {
	tests := []struct {
		name string
		r    Result
		want time.Duration
	}{
		{"no ops", Result{BusyCPU: time.Second}, 0},
		{"negative ops", Result{BusyCPU: time.Second, Ops: -1}, 0},
		{"per op", Result{BusyCPU: time.Second, Ops: 4000}, 250 * time.Microsecond},
		{"no CPU", Result{Ops: 10}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.CPUPerOp(); got != tt.want {
				t.Errorf("CPUPerOp() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestWrkArgs(t *testing.T) {
	to := netip.MustParseAddrPort("198.18.0.1:8080")
	tests := []struct {
		name    string
		d       time.Duration
		newConn bool
		want    string
	}{
		{"keep-alive", 5 * time.Second, false, "-t 2 -c 32 -d 5s --latency http://198.18.0.1:8080/"},
		{"new connections", 5 * time.Second, true, "-t 2 -c 32 -d 5s --latency -H Connection: close http://198.18.0.1:8080/"},
		{"fraction rounds up", 1500 * time.Millisecond, false, "-t 2 -c 32 -d 2s --latency http://198.18.0.1:8080/"},
		{"under a second is one", 10 * time.Millisecond, false, "-t 2 -c 32 -d 1s --latency http://198.18.0.1:8080/"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Join(wrkArgs(to, tt.d, tt.newConn), " "); got != tt.want {
				t.Errorf("wrkArgs = %q, want %q", got, tt.want)
			}
		})
	}
}

const wrkOK = `Running 1s test @ http://198.19.1.11:8080/
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   541.86us  312.45us  12.01ms   91.23%
    Req/Sec    29.91k     2.13k   33.40k    72.00%
  Latency Distribution
     50%  478.00us
     75%  600.00us
     90%  780.00us
     99%    1.51ms
  59519 requests in 1.00s, 8.69MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
Requests/sec:  59519.49
Transfer/sec:      8.69MB
`

// wrkRefused is wrk's output when every connection is refused.
const wrkRefused = `Running 1s test @ http://198.19.1.11:8081/
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     0.00us    0.00us   0.00us    -nan%
    Req/Sec     0.00      0.00     0.00      -nan%
  Latency Distribution
     50%    0.00us
     75%    0.00us
     90%    0.00us
     99%    0.00us
  0 requests in 1.00s, 0.00B read
  Socket errors: connect 31985, read 0, write 0, timeout 0
Requests/sec:      0.00
Transfer/sec:       0.00B
`

func TestWrkResult(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    Result
		wantErr string
	}{
		{name: "answered", out: wrkOK, want: Result{Rate: 59519.49, P50: 478 * time.Microsecond, P99: 1510 * time.Microsecond,
			Ops: 59519, Errors: 3, Elapsed: time.Second}},
		{name: "non-2xx", out: strings.Replace(wrkOK, "Requests/sec", "  Non-2xx or 3xx responses: 5\nRequests/sec", 1),
			want:    Result{Rate: 59519.49, P50: 478 * time.Microsecond, P99: 1510 * time.Microsecond, Ops: 59519, Errors: 8, Elapsed: time.Second},
			wantErr: "5 of 59519 responses not 2xx/3xx"},
		{name: "refused", out: wrkRefused, want: Result{Elapsed: time.Second}, wantErr: "nothing answered"},
		{name: "not wrk output", out: "unable to connect to 198.19.1.11:8081 Connection refused\n", want: Result{Elapsed: time.Second},
			wantErr: "no Requests/sec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := wrkResult(tt.out, time.Second)
			if tt.wantErr == "" && err != nil {
				t.Fatal(err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("wrkResult error = %v, want one containing %q", err, tt.wantErr)
			}
			if nothing := tt.wantErr == "nothing answered"; errors.Is(err, ErrNothingAnswered) != nothing {
				t.Errorf("wrkResult error = %v: is ErrNothingAnswered %t, want %t", err, !nothing, nothing)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("wrkResult (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFlowArgs(t *testing.T) {
	to := netip.MustParseAddrPort("198.18.0.1:9001")
	args := flowArgs(to, 1500*time.Millisecond, udpFlowSources())
	if args[0] != childArg {
		t.Fatalf("flowArgs starts with %q, want %q", args[0], childArg)
	}
	if got, want := strings.Join(args[1:], " "), "198.18.0.1:9001 1.5s 198.19.0.100,198.19.0.101,198.19.0.102,198.19.0.103,198.19.0.104,198.19.0.105,198.19.0.106,198.19.0.107"; got != want {
		t.Errorf("flowArgs = %q, want %q", got, want)
	}
	got, err := parseFlowArgs(args[1:])
	if err != nil {
		t.Fatal(err)
	}
	want := dataplane.UDPFlowsOptions{Target: to, Sources: udpFlowSources(), PortLo: 10000, PortHi: 65000, Workers: 16,
		Duration: 1500 * time.Millisecond, Payload: 64, Timeout: 200 * time.Millisecond}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
		cmp.Comparer(func(a, b netip.AddrPort) bool { return a == b })); diff != "" {
		t.Errorf("parseFlowArgs(flowArgs) (-want +got):\n%s", diff)
	}
}

func TestParseFlowArgsRejects(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"too few", []string{"198.18.0.1:9001", "1s"}, "want target duration sources"},
		{"no port", []string{"198.18.0.1", "1s", "198.19.0.100"}, "target"},
		{"bad duration", []string{"198.18.0.1:9001", "soon", "198.19.0.100"}, "duration"},
		{"zero duration", []string{"198.18.0.1:9001", "0s", "198.19.0.100"}, "duration"},
		{"bad source", []string{"198.18.0.1:9001", "1s", "198.19.0.100,client"}, "source"},
		{"no source", []string{"198.18.0.1:9001", "1s", ""}, "source"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := parseFlowArgs(tt.args); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("parseFlowArgs(%q) error = %v, want one containing %q", tt.args, err, tt.wantErr)
			}
		})
	}
}

func TestRunRejectsBadArguments(t *testing.T) {
	client := &lab.Host{Name: "client"}
	to := Target{Client: client, HTTP: netip.MustParseAddrPort("198.19.1.11:8080"), UDP: netip.MustParseAddrPort("198.19.1.11:9001")}
	tests := []struct {
		name     string
		workload string
		t        Target
		d        time.Duration
		wantErr  string
	}{
		{"unknown workload", "bulk", to, time.Second, `unknown workload "bulk"`},
		{"no client", KeepAlive, Target{HTTP: to.HTTP}, time.Second, "keepalive: no client host"},
		{"no HTTP address", NewConn, Target{Client: client, UDP: to.UDP}, time.Second, "newconn: the target has no address"},
		{"no UDP address", UDPFlows, Target{Client: client, HTTP: to.HTTP}, time.Second, "udp-flows: the target has no address"},
		{"no run length", UDPRR, to, 0, "udp-rr: run length 0s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := Run(context.Background(), tt.workload, tt.t, tt.d); err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Run error = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestRunCommand(t *testing.T) {
	node := &lab.Host{Name: "node"} // no namespace: runs here
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		limit   time.Duration
		program string
		args    []string
		want    string
		wantErr string
		wantIs  error
		// wantUnder is well short of the 10 s the program would take: it
		// shows the kill, not how fast a loaded machine carries it out.
		wantUnder time.Duration
	}{
		{name: "output", ctx: context.Background(), limit: 5 * time.Second, program: "sh", args: []string{"-c", "echo out; echo err >&2"}, want: "out\n"},
		{name: "failure wraps the output", ctx: context.Background(), limit: 5 * time.Second,
			program: "sh", args: []string{"-c", "echo out; echo why >&2; exit 3"}, want: "out\n", wantErr: "exit status 3\nwhy\nout"},
		{name: "killed at its limit", ctx: context.Background(), limit: 200 * time.Millisecond,
			program: "sleep", args: []string{"10"}, wantIs: errOverran, wantUnder: 8 * time.Second},
		{name: "killed with its children", ctx: context.Background(), limit: 200 * time.Millisecond,
			program: "sh", args: []string{"-c", "sleep 10; echo late"}, wantIs: errOverran, wantUnder: 8 * time.Second},
		{name: "cancelled", ctx: cancelled, limit: 5 * time.Second, program: "sleep", args: []string{"10"}, wantIs: context.Canceled, wantUnder: 8 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			got, err := runCommand(tt.ctx, node, tt.limit, tt.program, tt.args...)
			took := time.Since(start)
			switch {
			case tt.wantIs != nil:
				if !errors.Is(err, tt.wantIs) {
					t.Errorf("runCommand error = %v, want %v", err, tt.wantIs)
				}
			case tt.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("runCommand error = %v, want one containing %q", err, tt.wantErr)
				}
			case err != nil:
				t.Errorf("runCommand: %v", err)
			}
			if got != tt.want {
				t.Errorf("runCommand output = %q, want %q", got, tt.want)
			}
			if tt.wantUnder > 0 && took > tt.wantUnder {
				t.Errorf("runCommand took %v, want under %v", took, tt.wantUnder)
			}
		})
	}
}
