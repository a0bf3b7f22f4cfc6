package dataplane

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// IperfResult is what the benchmark keeps of an iperf3 -J run.
type IperfResult struct {
	// ReceivedBitsPerSecond is the receiver's rate over the whole test:
	// bytes that arrived, not bytes the sender queued.
	ReceivedBitsPerSecond float64
	// ReceivedBytes is what arrived over the whole test.
	ReceivedBytes int64
	// Retransmits over all streams (TCP only).
	Retransmits int
	Streams     int
}

// ParseIperf3JSON reads the output of `iperf3 -c … -J`. A run that failed
// (iperf3 puts its error into the JSON) is an error naming iperf3's message.
func ParseIperf3JSON(out []byte) (IperfResult, error) {
	var doc struct {
		Error string `json:"error"`
		Start struct {
			TestStart struct {
				NumStreams int `json:"num_streams"`
			} `json:"test_start"`
		} `json:"start"`
		End struct {
			SumSent struct {
				Retransmits int `json:"retransmits"`
			} `json:"sum_sent"`
			SumReceived *struct {
				BitsPerSecond float64 `json:"bits_per_second"`
				Bytes         int64   `json:"bytes"`
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return IperfResult{}, fmt.Errorf("iperf3 JSON: %w; output:\n%s", err, clip(out))
	}
	if doc.Error != "" {
		return IperfResult{}, fmt.Errorf("iperf3: %s", doc.Error)
	}
	if doc.End.SumReceived == nil || doc.End.SumReceived.Bytes == 0 {
		return IperfResult{}, fmt.Errorf("iperf3 reported no received bytes; output:\n%s", clip(out))
	}
	return IperfResult{
		ReceivedBitsPerSecond: doc.End.SumReceived.BitsPerSecond,
		ReceivedBytes:         doc.End.SumReceived.Bytes,
		Retransmits:           doc.End.SumSent.Retransmits,
		Streams:               doc.Start.TestStart.NumStreams,
	}, nil
}

// WrkResult is what the benchmark keeps of a wrk --latency run.
type WrkResult struct {
	RequestsPerSecond float64
	Requests          int64
	P50, P99          time.Duration
	// SocketErrors sums wrk's connect, read, write and timeout errors;
	// Non2xx counts responses that were not 2xx or 3xx.
	SocketErrors int64
	Non2xx       int64
}

var (
	wrkRate     = regexp.MustCompile(`(?m)^Requests/sec:\s+([0-9.]+)\s*$`)
	wrkTotal    = regexp.MustCompile(`(?m)^\s*(\d+) requests in `)
	wrkPercent  = regexp.MustCompile(`(?m)^\s+(50|99)(?:\.0+)?%\s+([0-9.]+)(us|ms|s|m)\s*$`)
	wrkSockErrs = regexp.MustCompile(`(?m)^\s*Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)\s*$`)
	wrkNon2xx   = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses: (\d+)\s*$`)
)

// ParseWrk reads wrk's text output (run with --latency for the percentiles).
func ParseWrk(out string) (WrkResult, error) {
	var r WrkResult
	m := wrkRate.FindStringSubmatch(out)
	if m == nil {
		return r, fmt.Errorf("wrk output has no Requests/sec line:\n%s", clip([]byte(out)))
	}
	var err error
	if r.RequestsPerSecond, err = strconv.ParseFloat(m[1], 64); err != nil {
		return r, fmt.Errorf("wrk Requests/sec %q: %w", m[1], err)
	}
	if m := wrkTotal.FindStringSubmatch(out); m != nil {
		r.Requests, _ = strconv.ParseInt(m[1], 10, 64)
	}
	for _, m := range wrkPercent.FindAllStringSubmatch(out, -1) {
		d, err := wrkDuration(m[2], m[3])
		if err != nil {
			return r, err
		}
		if m[1] == "50" {
			r.P50 = d
		} else {
			r.P99 = d
		}
	}
	if r.P50 == 0 || r.P99 == 0 {
		return r, fmt.Errorf("wrk output has no 50%%/99%% latency lines (run it with --latency):\n%s", clip([]byte(out)))
	}
	if m := wrkSockErrs.FindStringSubmatch(out); m != nil {
		for _, s := range m[1:] {
			n, _ := strconv.ParseInt(s, 10, 64)
			r.SocketErrors += n
		}
	}
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		r.Non2xx, _ = strconv.ParseInt(m[1], 10, 64)
	}
	return r, nil
}

// wrkDuration converts wrk's "123.45us" style numbers.
func wrkDuration(num, unit string) (time.Duration, error) {
	v, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("wrk latency %s%s: %w", num, unit, err)
	}
	scale := map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "m": time.Minute}[unit]
	return time.Duration(v * float64(scale)), nil
}

// ParseVmRSS returns VmRSS in KiB from the text of /proc/<pid>/status.
func ParseVmRSS(status string) (int64, error) {
	for line := range strings.Lines(status) {
		rest, ok := strings.CutPrefix(line, "VmRSS:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("unexpected VmRSS line %q", strings.TrimSpace(line))
		}
		return strconv.ParseInt(f[0], 10, 64)
	}
	return 0, fmt.Errorf("no VmRSS line in /proc/<pid>/status (a kernel thread or a zombie?)")
}

func clip(out []byte) string {
	const max = 2000
	if len(out) > max {
		return string(out[:max]) + "…"
	}
	return string(out)
}
