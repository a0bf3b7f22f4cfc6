package dataplane

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"kproxy.dev/kproxy/bench/benchtable"
)

// Knobs for comparison runs (variants of a relay measured against each
// other): they choose what is measured and how often, never how.
const (
	// PathsEnv measures some paths only: "name[,name]". DNAT is always
	// measured, as every ratio needs it.
	PathsEnv = "KPROXY_DATAPLANE_PATHS"
	// RoundsEnv measures every row this many times, the paths in a rotated
	// order each round so that none always runs first or last; the table
	// shows each path's median and the log every round's values.
	RoundsEnv = "KPROXY_DATAPLANE_ROUNDS"
	// KproxyModeEnv, set to "iptables" or "nftables", measures that kproxy
	// mode (kernel DNAT from kube-proxy's rule model) in place of the
	// userspace mode, in a table of its own: the modes cannot share a node,
	// as each removes the others' rules when it starts.
	KproxyModeEnv = "KPROXY_DATAPLANE_KPROXY_MODE"
)

// iptablesModeTarget is the iptables and nftables modes' target on every
// rate row: the kernel carries their traffic, so they should match a
// hand-written DNAT rule within run-to-run noise.
const iptablesModeTarget = 0.95

func kproxyModeFromEnv() (string, error) {
	switch mode := os.Getenv(KproxyModeEnv); mode {
	case "", "userspace":
		return "userspace", nil
	case "iptables", "nftables":
		return mode, nil
	default:
		return "", fmt.Errorf("%s=%q: want userspace, iptables or nftables", KproxyModeEnv, mode)
	}
}

// iptablesModeRows turns the userspace rows into a kernel mode's (iptables
// or nftables): the
// rate targets become iptablesModeTarget, and the rows of a proxy process
// go (no process holds the connections).
func iptablesModeRows(rows []Row) []Row {
	var out []Row
	for _, r := range rows {
		if strings.HasPrefix(r.ID, "idle-conn") || strings.HasSuffix(r.ID, "-proxy-cpu") {
			continue
		}
		if r.MinRatio > 0 {
			r.MinRatio = iptablesModeTarget
		}
		out = append(out, r)
	}
	return out
}

type comparison struct {
	paths  []string // empty: all
	rounds int
}

func comparisonFromEnv() (comparison, error) {
	return parseComparison(os.Getenv(PathsEnv), os.Getenv(RoundsEnv))
}

func parseComparison(paths, rounds string) (comparison, error) {
	c := comparison{rounds: 1}
	if paths != "" {
		c.paths = strings.Split(paths, ",")
	}
	if rounds != "" {
		n, err := strconv.Atoi(rounds)
		if err != nil || n < 1 || n > 20 {
			return comparison{}, fmt.Errorf("%s=%q: want a number of rounds from 1 to 20", RoundsEnv, rounds)
		}
		c.rounds = n
	}
	return c, nil
}

// includes reports whether path p is measured.
func (c comparison) includes(p Path) bool {
	return len(c.paths) == 0 || p == DNAT || slices.Contains(c.paths, string(p))
}

// rotate returns paths starting at index round (mod len).
func rotate[T any](paths []T, round int) []T {
	if len(paths) == 0 {
		return nil
	}
	k := round % len(paths)
	return append(append([]T(nil), paths[k:]...), paths[:k]...)
}

// roundValues collects every round's value of each row and path, in order.
type roundValues struct {
	rows   []string
	values map[string]map[Path][]float64
	order  map[string][]Path
}

func newRoundValues() *roundValues {
	return &roundValues{values: map[string]map[Path][]float64{}, order: map[string][]Path{}}
}

func (r *roundValues) add(row string, p Path, v float64) {
	if r.values[row] == nil {
		r.values[row] = map[Path][]float64{}
		r.rows = append(r.rows, row)
	}
	if r.values[row][p] == nil {
		r.order[row] = append(r.order[row], p)
	}
	r.values[row][p] = append(r.values[row][p], v)
}

type rowValue struct {
	row   string
	path  Path
	value float64
}

// medians returns each row and path's median (the mean of the middle two
// for an even count).
func (r *roundValues) medians() []rowValue {
	var out []rowValue
	for _, row := range r.rows {
		for _, p := range r.order[row] {
			out = append(out, rowValue{row, p, benchtable.Median(r.values[row][p])})
		}
	}
	return out
}

// report lists, per row and path, every round's value and its ratio to
// ref's value in the same round.
func (r *roundValues) report(ref Path) string {
	var b strings.Builder
	for _, row := range r.rows {
		refs := r.values[row][ref]
		for _, p := range r.order[row] {
			fmt.Fprintf(&b, "%s %s:", row, p)
			for i, v := range r.values[row][p] {
				fmt.Fprintf(&b, " %.4g", v)
				if p != ref && i < len(refs) && refs[i] != 0 {
					fmt.Fprintf(&b, " (%.0f%%)", 100*v/refs[i])
				}
			}
			fmt.Fprintf(&b, " median %.4g\n", benchtable.Median(r.values[row][p]))
		}
	}
	return b.String()
}

// clockTicksPerSecond is USER_HZ, the unit of /proc/<pid>/stat's CPU times
// (100 on every Linux architecture Go supports).
const clockTicksPerSecond = 100

// ProcCPU is a process's CPU time, all threads: in user space and in the
// kernel on its behalf.
type ProcCPU struct{ User, System time.Duration }

// Total is user plus system time.
func (c ProcCPU) Total() time.Duration { return c.User + c.System }

// ParseProcCPU reads the CPU times from the contents of /proc/<pid>/stat.
func ParseProcCPU(stat string) (ProcCPU, error) {
	// The command name, in parentheses, may itself hold spaces and
	// parentheses: fields are counted from the last ')'.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return ProcCPU{}, fmt.Errorf("/proc/<pid>/stat %q: no command name", clipString(stat))
	}
	f := strings.Fields(stat[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return ProcCPU{}, fmt.Errorf("/proc/<pid>/stat %q: too few fields", clipString(stat))
	}
	var ticks [2]time.Duration
	for j, s := range f[11:13] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return ProcCPU{}, fmt.Errorf("/proc/<pid>/stat CPU time %q: %w", s, err)
		}
		ticks[j] = time.Duration(n) * time.Second / clockTicksPerSecond
	}
	return ProcCPU{User: ticks[0], System: ticks[1]}, nil
}

func clipString(s string) string { return clip([]byte(s)) }

// MachineCPU is the whole machine's CPU time from /proc/stat: busy (user,
// nice, system, irq, softirq, steal) and total (busy plus idle and iowait),
// summed over every CPU.
type MachineCPU struct{ Busy, Total time.Duration }

// ParseMachineCPU reads the aggregate "cpu" line of /proc/stat's contents.
func ParseMachineCPU(stat string) (MachineCPU, error) {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return MachineCPU{}, fmt.Errorf("/proc/stat %q: want a first line \"cpu user nice system idle iowait irq softirq steal ...\"", clipString(line))
	}
	var ticks [8]int64
	for i := range ticks {
		n, err := strconv.ParseInt(f[i+1], 10, 64)
		if err != nil {
			return MachineCPU{}, fmt.Errorf("/proc/stat CPU time %q: %w", f[i+1], err)
		}
		ticks[i] = n
	}
	user, nice, system, idle, iowait, irq, softirq, steal := ticks[0], ticks[1], ticks[2], ticks[3], ticks[4], ticks[5], ticks[6], ticks[7]
	busy := user + nice + system + irq + softirq + steal
	toDuration := func(t int64) time.Duration { return time.Duration(t) * time.Second / clockTicksPerSecond }
	return MachineCPU{Busy: toDuration(busy), Total: toDuration(busy + idle + iowait)}, nil
}

// machineCPU reads /proc/stat, which every network namespace shares.
func machineCPU() (MachineCPU, error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return MachineCPU{}, err
	}
	return ParseMachineCPU(string(stat))
}

// procCPU reads pid's CPU time.
func procCPU(pid int) (ProcCPU, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ProcCPU{}, err
	}
	return ParseProcCPU(string(stat))
}
