package modes

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Settings from the environment (all optional).
const (
	// EnvSizes: service counts of the host section ("1,1000,10000").
	EnvSizes = "KPROXY_BENCH_SIZES"
	// EnvModes: host modes to measure (mode IDs; default all). The DNAT
	// reference is always measured.
	EnvModes = "KPROXY_BENCH_MODES"
	// EnvRunSeconds and EnvRepeats: each data-plane workload runs
	// Repeats times for RunSeconds.
	EnvRunSeconds = "KPROXY_BENCH_RUN_SECONDS"
	EnvRepeats    = "KPROXY_BENCH_REPEATS"
	// EnvNewServices: new services timed per cell.
	EnvNewServices = "KPROXY_BENCH_NEW_SERVICES"
	// EnvGuest=off skips the guest (IPVS) section; EnvGuestSizes are its
	// service counts.
	EnvGuest      = "KPROXY_BENCH_GUEST"
	EnvGuestSizes = "KPROXY_BENCH_GUEST_SIZES"
	// EnvOut is the directory that receives results.json and
	// bench-modes.md (make bench-modes then draws the plots there).
	EnvOut = "KPROXY_BENCH_OUT"
	// EnvLogDir keeps every proxy's log there (diagnostics).
	EnvLogDir = "KPROXY_BENCH_LOG_DIR"
)

// maxSize bounds a size: bulk ClusterIPs run from 198.18.1.0 to
// 198.18.253.255 (bench/syncscale's plan), below the measured service's.
const maxSize = 63000

// endpointsPerService is the "× 10 endpoints": every bulk service
// has that many (bench/syncscale's plan), and so has the measured one.
const endpointsPerService = 10

// HostModes lists the host section's modes, in table order.
func HostModes() []string {
	return []string{ModeUserspaceRedirect, ModeUserspaceLocal, ModeUserspaceSKLookup, ModeKproxyIPTablesNFT, ModeKproxyIPTablesLegacy,
		ModeKproxyNFTables, ModeKubeProxyIPTables, ModeKubeProxyIPTablesLegacy, ModeKubeProxyNFTables}
}

// Config is a run's settings: what Settings records, and how to run.
type Config struct {
	Settings
	Guest  bool
	OutDir string
	LogDir string
	// Budgets bound a proxy's first full sync: past it the cell records
	// the budget as exceeded.
	KproxyBudget, KubeProxyBudget time.Duration
}

// DefaultConfig is `make bench-modes` without settings: well under 30
// minutes on a 2-core machine.
func DefaultConfig() Config {
	return Config{
		Settings: Settings{
			Sizes:             []int{1, 1000, 10000},
			GuestSizes:        []int{1, 1000},
			Endpoints:         endpointsPerService,
			Modes:             HostModes(),
			RunSeconds:        2,
			Repeats:           2,
			NewServiceRepeats: 3,
		},
		Guest: true,
		// bench-syncscale's budgets: kube-proxy's iptables mode on
		// nf_tables needs more than 120 s from 5,000 services on, and
		// waiting longer would spend the run's half hour on one cell.
		KproxyBudget:    5 * time.Minute,
		KubeProxyBudget: 2 * time.Minute,
	}
}

// ConfigFromEnv reads the settings above over DefaultConfig; a value it
// cannot read is an error naming the variable.
func ConfigFromEnv(getenv func(string) string) (Config, error) {
	c := DefaultConfig()
	var err error
	if v := getenv(EnvSizes); v != "" {
		if c.Sizes, err = parseSizeList(EnvSizes, v); err != nil {
			return c, err
		}
	}
	if v := getenv(EnvGuestSizes); v != "" {
		if c.GuestSizes, err = parseSizeList(EnvGuestSizes, v); err != nil {
			return c, err
		}
	}
	if v := getenv(EnvModes); v != "" {
		if c.Modes, err = parseModes(v); err != nil {
			return c, err
		}
	}
	if v := getenv(EnvRunSeconds); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil || f < 0.1 || f > 600 {
			return c, fmt.Errorf("%s=%q: want seconds from 0.1 to 600", EnvRunSeconds, v)
		}
		c.RunSeconds = f
	}
	for _, s := range []struct {
		name string
		dst  *int
		max  int
	}{{EnvRepeats, &c.Repeats, 20}, {EnvNewServices, &c.NewServiceRepeats, 20}} {
		v := getenv(s.name)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > s.max {
			return c, fmt.Errorf("%s=%q: want a whole number from 1 to %d", s.name, v, s.max)
		}
		*s.dst = n
	}
	switch v := getenv(EnvGuest); v {
	case "", "on":
	case "off":
		c.Guest = false
	default:
		return c, fmt.Errorf("%s=%q: want on or off", EnvGuest, v)
	}
	c.OutDir, c.LogDir = getenv(EnvOut), getenv(EnvLogDir)
	return c, nil
}

func parseSizeList(name, v string) ([]int, error) {
	var sizes []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > maxSize {
			return nil, fmt.Errorf("%s=%q: %q is not a service count from 1 to %d", name, v, f, maxSize)
		}
		if !slices.Contains(sizes, n) {
			sizes = append(sizes, n)
		}
	}
	slices.Sort(sizes)
	return sizes, nil
}

func parseModes(v string) ([]string, error) {
	var out []string
	for _, f := range strings.Split(v, ",") {
		m := strings.TrimSpace(f)
		if !slices.Contains(HostModes(), m) {
			return nil, fmt.Errorf("%s=%q: %q is not a host mode (want some of %s)", EnvModes, v, m, strings.Join(HostModes(), ", "))
		}
		if !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	// Table order, whatever order they were given in.
	slices.SortFunc(out, func(a, b string) int { return slices.Index(HostModes(), a) - slices.Index(HostModes(), b) })
	return out, nil
}

// RunFor is each data-plane run's length.
func (c Config) RunFor() time.Duration { return time.Duration(c.RunSeconds * float64(time.Second)) }
