package dataplane

import (
	"strings"
	"testing"
	"time"
)

const wrkKeepAlive = `Running 5s test @ http://198.18.1.1:8080/
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency   541.86us  312.45us  12.01ms   91.23%
    Req/Sec    29.91k     2.13k   33.40k    72.00%
  Latency Distribution
     50%  478.00us
     75%  600.00us
     90%  780.00us
     99%    1.51ms
  297598 requests in 5.00s, 43.44MB read
Requests/sec:  59519.49
Transfer/sec:      8.69MB
`

const wrkWithErrors = `Running 5s test @ http://198.18.4.1:8080/
  2 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.10ms    1.00ms   1.02s    91.23%
    Req/Sec     7.00k     2.13k   9.40k    72.00%
  Latency Distribution
     50%    2.00ms
     75%    2.50ms
     90%    3.00ms
     99%    1.02s
  70000 requests in 5.00s, 10.44MB read
  Socket errors: connect 1, read 12, write 3, timeout 4
  Non-2xx or 3xx responses: 7
Requests/sec:  14000.00
Transfer/sec:      2.09MB
`

func TestParseWrk(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    WrkResult
		wantErr string
	}{
		{name: "keep-alive run", out: wrkKeepAlive, want: WrkResult{
			RequestsPerSecond: 59519.49, Requests: 297598, P50: 478 * time.Microsecond, P99: 1510 * time.Microsecond}},
		{name: "errors and seconds", out: wrkWithErrors, want: WrkResult{
			RequestsPerSecond: 14000, Requests: 70000, P50: 2 * time.Millisecond, P99: 1020 * time.Millisecond,
			SocketErrors: 20, Non2xx: 7}},
		{name: "no latency distribution", out: strings.Replace(wrkKeepAlive, "  Latency Distribution\n     50%  478.00us\n", "", 1),
			wantErr: "no 50%/99% latency"},
		{name: "not wrk output", out: "unable to connect to 198.18.1.1:8080 Connection refused\n", wantErr: "no Requests/sec"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseWrk(tt.out)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseWrk error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ParseWrk = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseIperf3JSON(t *testing.T) {
	tests := []struct {
		name    string
		out     string
		want    IperfResult
		wantErr string
	}{
		{name: "eight streams",
			out: `{"start":{"test_start":{"protocol":"TCP","num_streams":8}},"intervals":[],
			       "end":{"sum_sent":{"bytes":1000,"bits_per_second":2.1e10,"retransmits":42},
			              "sum_received":{"bytes":990,"bits_per_second":2.0e10}}}`,
			want: IperfResult{ReceivedBitsPerSecond: 2.0e10, ReceivedBytes: 990, Retransmits: 42, Streams: 8}},
		{name: "iperf3 error", out: `{"start":{},"intervals":[],"end":{},"error":"error - unable to connect to server: Connection refused"}`,
			wantErr: "unable to connect to server"},
		{name: "nothing received", out: `{"start":{"test_start":{"num_streams":1}},"end":{"sum_received":{"bytes":0,"bits_per_second":0}}}`,
			wantErr: "no received bytes"},
		{name: "not JSON", out: "iperf3: error - the server is busy running a test", wantErr: "iperf3 JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseIperf3JSON([]byte(tt.out))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseIperf3JSON error = %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("ParseIperf3JSON = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseVmRSS(t *testing.T) {
	tests := []struct {
		name    string
		status  string
		want    int64
		wantErr bool
	}{
		{name: "process", status: "Name:\tkproxy\nVmPeak:\t  900000 kB\nVmRSS:\t   20480 kB\nRssAnon:\t 10000 kB\n", want: 20480},
		{name: "kernel thread", status: "Name:\tkworker/0:1\nState:\tI (idle)\n", wantErr: true},
		{name: "odd unit", status: "VmRSS:\t 20 MB\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseVmRSS(tt.status)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("ParseVmRSS = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseRelaySpec(t *testing.T) {
	good, err := ParseRelaySpec("udp,0.0.0.0:7003,198.19.1.11:9001")
	if err != nil {
		t.Fatal(err)
	}
	if good.String() != "udp,0.0.0.0:7003,198.19.1.11:9001" {
		t.Errorf("round trip gave %q", good.String())
	}
	for _, bad := range []string{"", "tcp,0.0.0.0:1", "sctp,0.0.0.0:1,1.2.3.4:5", "tcp,nowhere,1.2.3.4:5", "tcp,0.0.0.0:1,1.2.3.4"} {
		if _, err := ParseRelaySpec(bad); err == nil {
			t.Errorf("ParseRelaySpec(%q) accepted a bad spec", bad)
		}
	}
}
