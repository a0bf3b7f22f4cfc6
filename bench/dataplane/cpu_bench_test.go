package dataplane

import (
	"time"
)

// cpuMeter measures what one run cost: the path's proxy process (when it has
// one) and the whole machine, client, servers and kernel included. On a
// machine the run keeps busy, rates are bounded by the machine's CPU per
// request: a path needing twice DNAT's CPU per request cannot reach half of
// DNAT's rate, however its proxy is written. The rates' ratios move with
// whatever else runs; CPU per request moves much less.
type cpuMeter struct {
	p             *dataPath
	proxyBefore   ProcCPU
	proxyOK       bool // the path has a proxy process whose times read
	machineBefore MachineCPU
	machineErr    error
}

func startCPU(p *dataPath) *cpuMeter {
	m := &cpuMeter{p: p}
	m.proxyBefore, m.proxyOK = proxyCPU(p)
	m.machineBefore, m.machineErr = machineCPU()
	return m
}

// record reports, for the work the run did (requests, or gigabytes when
// perGB), row+"-proxy-cpu" and row+"-machine-cpu" per unit (µs per request
// or ms per GB), row+"-proxy-user", the share of the proxy's time spent in
// user space (the rest is the kernel's work on its system calls, which a
// better-written proxy could only avoid by making fewer), and row+"-busy",
// the machine's busy share of the run.
func (m *cpuMeter) record(record func(string, float64, string), row string, work float64, perGB bool) {
	if work <= 0 {
		return
	}
	unit, scale := "µs/req", float64(time.Microsecond)
	if perGB {
		unit, scale = "ms/GB", float64(time.Millisecond)
	}
	if now, ok := proxyCPU(m.p); ok && m.proxyOK {
		used := ProcCPU{User: now.User - m.proxyBefore.User, System: now.System - m.proxyBefore.System}
		if used.Total() > 0 {
			record(row+"-proxy-cpu", float64(used.Total())/scale/work, "proxy-cpu-"+unit)
			record(row+"-proxy-user", 100*float64(used.User)/float64(used.Total()), "proxy-user-%")
		}
	}
	after, err := machineCPU()
	if m.machineErr != nil || err != nil {
		return
	}
	busy, total := after.Busy-m.machineBefore.Busy, after.Total-m.machineBefore.Total
	if total <= 0 {
		return
	}
	record(row+"-machine-cpu", float64(busy)/scale/work, "machine-cpu-"+unit)
	record(row+"-busy", 100*float64(busy)/float64(total), "busy-%")
}
