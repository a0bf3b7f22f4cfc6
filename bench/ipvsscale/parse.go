package ipvsscale

import (
	"bufio"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// guestResultPattern finds a BenchmarkGuestIPVSSync result anywhere in a
// line: the parent benchmark prints its name before the child in the fresh
// namespace writes to the same output, so a result may follow other text.
const guestResultPattern = `BenchmarkGuestIPVSSync/ports=(\d+)(?:-\d+)?\s+(\d+)\s+(.*)$`

// guestKernelPattern is the line the guest benchmark logs about its kernel.
const guestKernelPattern = `ipvsscale: guest kernel (\S+)`

// GuestOutput is what a guest run's output told: a result per port count
// and the guest's kernel release.
type GuestOutput struct {
	Results map[int]GuestResult
	Kernel  string
}

// ParseGuestOutput reads the result lines of BenchmarkGuestIPVSSync from a
// guest run's output; other lines are ignored. A result line whose metrics
// do not parse is an error naming it.
func ParseGuestOutput(r io.Reader) (GuestOutput, error) {
	guestResultLine, guestKernelLine := regexp.MustCompile(guestResultPattern), regexp.MustCompile(guestKernelPattern)
	out := GuestOutput{Results: map[int]GuestResult{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if m := guestKernelLine.FindStringSubmatch(line); m != nil {
			out.Kernel = m[1]
			continue
		}
		m := guestResultLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		res, err := parseResult(m[1], m[2], m[3])
		if err != nil {
			return out, fmt.Errorf("guest result %q: %w", strings.TrimSpace(m[0]), err)
		}
		out.Results[res.Ports] = res
	}
	if err := sc.Err(); err != nil {
		return out, fmt.Errorf("reading the guest's output: %w", err)
	}
	return out, nil
}

func parseResult(ports, iterations, metrics string) (GuestResult, error) {
	var res GuestResult
	var err error
	if res.Ports, err = strconv.Atoi(ports); err != nil {
		return res, fmt.Errorf("port count: %w", err)
	}
	if res.Changes, err = strconv.Atoi(iterations); err != nil {
		return res, fmt.Errorf("iterations: %w", err)
	}
	values, err := metricValues(metrics)
	if err != nil {
		return res, err
	}
	seen := 0
	for unit, set := range map[string]func(float64){
		UnitFullSync:          func(v float64) { res.FullSync = seconds(v) },
		UnitFullSyncOps:       func(v float64) { res.FullSyncOps = int(v) },
		UnitChange:            func(v float64) { res.Change = seconds(v / 1000) },
		UnitChangeOps:         func(v float64) { res.ChangeOps = v },
		UnitNoChangeOps:       func(v float64) { res.NoChangeOps = int(v) },
		UnitFullResync:        func(v float64) { res.FullResync = seconds(v) },
		UnitFullResyncReads:   func(v float64) { res.FullResyncReads = int(v) },
		UnitFullResyncEnsures: func(v float64) { res.FullResyncEnsures = int(v) },
		UnitFullResyncWrites:  func(v float64) { res.FullResyncWrites = int(v) },
	} {
		if v, ok := values[unit]; ok {
			set(v)
			seen++
		}
	}
	if seen == 0 {
		return res, fmt.Errorf("none of the metrics %s, %s, … is reported", UnitFullSync, UnitChange)
	}
	return res, nil
}

// metricValues splits "12 ns/op\t4.5 s/full-sync" into values by unit.
func metricValues(s string) (map[string]float64, error) {
	fields := strings.Fields(s)
	if len(fields)%2 != 0 {
		return nil, fmt.Errorf("metrics %q are not value-unit pairs", s)
	}
	out := make(map[string]float64, len(fields)/2)
	for i := 0; i < len(fields); i += 2 {
		v, err := strconv.ParseFloat(fields[i], 64)
		if err != nil {
			return nil, fmt.Errorf("metric %s: %w", fields[i+1], err)
		}
		out[fields[i+1]] = v
	}
	return out, nil
}

func seconds(v float64) time.Duration { return time.Duration(v * float64(time.Second)) }
