package syncscale

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"kproxy.dev/kproxy/redirect/kernel"
)

// Environment variables that shape a run.
const (
	SizesEnv           = "KPROXY_SYNCSCALE_SIZES"
	BackendsEnv        = "KPROXY_SYNCSCALE_BACKENDS"
	KubeProxyBudgetEnv = "KPROXY_SYNCSCALE_KUBEPROXY_BUDGET"
	KproxyBudgetEnv    = "KPROXY_SYNCSCALE_KPROXY_BUDGET"
	MinSyncPeriodEnv   = "KPROXY_SYNCSCALE_MIN_SYNC_PERIOD"
	NPLRepeatsEnv      = "KPROXY_SYNCSCALE_NPL_REPEATS"
)

// MaxServices is the most services a row can hold: the address plan (see
// ServiceIP) has room for this many ClusterIPs below the ones it keeps for
// the network-programming services.
const MaxServices = 60000

// Settings is what one run measures and how.
type Settings struct {
	// Sizes are the service counts, one row per size and backend.
	Sizes    []int
	Backends []kernel.Backend
	// KubeProxyBudget bounds kube-proxy's first full sync, KproxyBudget
	// kproxy's; a sync still running then is reported as over budget, and
	// that proxy's other numbers in the row are not measured.
	KubeProxyBudget, KproxyBudget time.Duration
	// MinSyncPeriod is --iptables-min-sync-period, the same for both.
	MinSyncPeriod time.Duration
	// NPLRepeats is how many new services the network programming latency
	// is the median of.
	NPLRepeats int
}

// DefaultSettings are issue 4's sizes up to 5,000, kube-proxy's own
// minimum sync period, and a kube-proxy budget that keeps a default run
// within about half an hour.
func DefaultSettings() Settings {
	return Settings{
		Sizes:           []int{100, 1000, 5000},
		Backends:        []kernel.Backend{kernel.NFT, kernel.Legacy},
		KubeProxyBudget: 120 * time.Second,
		KproxyBudget:    600 * time.Second,
		MinSyncPeriod:   time.Second,
		NPLRepeats:      5,
	}
}

// SettingsFromEnv returns DefaultSettings changed by the environment, as
// read by getenv (os.Getenv in the benchmark). Every bad value is reported,
// each naming its variable.
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	s := DefaultSettings()
	var errs []string
	if v := getenv(SizesEnv); v != "" {
		sizes, err := parseSizes(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q: %v", SizesEnv, v, err))
		}
		s.Sizes = sizes
	}
	if v := getenv(BackendsEnv); v != "" {
		backends, err := parseBackends(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q: %v", BackendsEnv, v, err))
		}
		s.Backends = backends
	}
	for _, d := range []struct {
		env string
		dst *time.Duration
	}{{KubeProxyBudgetEnv, &s.KubeProxyBudget}, {KproxyBudgetEnv, &s.KproxyBudget}, {MinSyncPeriodEnv, &s.MinSyncPeriod}} {
		v := getenv(d.env)
		if v == "" {
			continue
		}
		parsed, err := time.ParseDuration(v)
		switch {
		case err != nil:
			errs = append(errs, fmt.Sprintf("%s=%q: %v", d.env, v, err))
		case parsed < 0 || (parsed == 0 && d.env != MinSyncPeriodEnv):
			errs = append(errs, fmt.Sprintf("%s=%q: want a positive duration", d.env, v))
		default:
			*d.dst = parsed
		}
	}
	if v := getenv(NPLRepeatsEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			errs = append(errs, fmt.Sprintf("%s=%q: want a count from 1 to 100", NPLRepeatsEnv, v))
		} else {
			s.NPLRepeats = n
		}
	}
	if len(errs) > 0 {
		return s, fmt.Errorf("bad benchmark settings: %s", strings.Join(errs, "; "))
	}
	return s, nil
}

func parseSizes(v string) ([]int, error) {
	var sizes []int
	for _, f := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > MaxServices {
			return nil, fmt.Errorf("%q is not a service count from 1 to %d", f, MaxServices)
		}
		if !slices.Contains(sizes, n) {
			sizes = append(sizes, n)
		}
	}
	return sizes, nil
}

func parseBackends(v string) ([]kernel.Backend, error) {
	var out []kernel.Backend
	for _, f := range strings.Split(v, ",") {
		b := kernel.Backend(strings.TrimSpace(f))
		if !slices.Contains(kernel.Backends(), b) {
			return nil, fmt.Errorf("%q is not an iptables backend (want nft or legacy)", f)
		}
		if !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	return out, nil
}

// RowSpec is one row of the table: a backend and a service count.
type RowSpec struct {
	Backend  kernel.Backend
	Services int
}

// Name is the row's sub-benchmark name, such as "nft-5000".
func (r RowSpec) Name() string { return fmt.Sprintf("%s-%d", r.Backend, r.Services) }

// Rows lists the rows in run order: size by size, every backend at one
// size before the next, so an interrupted run has compared both backends
// on the sizes it finished.
func (s Settings) Rows() []RowSpec {
	var rows []RowSpec
	for _, n := range s.Sizes {
		for _, b := range s.Backends {
			rows = append(rows, RowSpec{Backend: b, Services: n})
		}
	}
	return rows
}

// Estimate is a generous guess of a run's length, to recognise a test
// timeout that would kill it part-way: per row, the API server and
// objects, both proxies' budgets at most, and their measurements.
func (s Settings) Estimate() time.Duration {
	var total time.Duration
	for _, r := range s.Rows() {
		perService := time.Duration(r.Services) * 5 * time.Millisecond
		total += 2*time.Minute + perService + min(s.KproxyBudget, 2*time.Minute+10*perService) + s.KubeProxyBudget
	}
	return total
}

// String describes the settings for the table's header.
func (s Settings) String() string {
	sizes := make([]string, len(s.Sizes))
	for i, n := range s.Sizes {
		sizes[i] = strconv.Itoa(n)
	}
	backends := make([]string, len(s.Backends))
	for i, b := range s.Backends {
		backends[i] = string(b)
	}
	return fmt.Sprintf("sizes %s, backends %s, kube-proxy budget %v, kproxy budget %v, --iptables-min-sync-period=%v, %d new services for network programming latency",
		strings.Join(sizes, ","), strings.Join(backends, ","), s.KubeProxyBudget, s.KproxyBudget, s.MinSyncPeriod, s.NPLRepeats)
}
