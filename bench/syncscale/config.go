package syncscale

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Environment variables that shape a run.
const (
	SizesEnv = "KPROXY_SYNCSCALE_SIZES"
	ModesEnv = "KPROXY_SYNCSCALE_MODES"
	// BackendsEnv is ModesEnv's older name, from when every row was the
	// iptables mode: "nft,legacy" still picks those two modes.
	BackendsEnv        = "KPROXY_SYNCSCALE_BACKENDS"
	ProxiesEnv         = "KPROXY_SYNCSCALE_PROXIES"
	KubeProxyBudgetEnv = "KPROXY_SYNCSCALE_KUBEPROXY_BUDGET"
	KproxyBudgetEnv    = "KPROXY_SYNCSCALE_KPROXY_BUDGET"
	MinSyncPeriodEnv   = "KPROXY_SYNCSCALE_MIN_SYNC_PERIOD"
	NPLRepeatsEnv      = "KPROXY_SYNCSCALE_NPL_REPEATS"
	// Diagnostics, never part of a published table: LogDirEnv keeps every
	// proxy's log there (ROW-PROXY.log, and for the nftables rows the
	// table after the first sync, ROW-PROXY.nft), KproxyFlagsEnv adds flags to
	// kproxy's (space-separated, such as "-v=4").
	LogDirEnv      = "KPROXY_SYNCSCALE_LOG_DIR"
	KproxyFlagsEnv = "KPROXY_SYNCSCALE_KPROXY_FLAGS"
)

// MaxServices is the most services a row can hold: the address plan (see
// ServiceIP) has room for this many ClusterIPs below the ones it keeps for
// the network-programming services.
const MaxServices = 60000

// Settings is what one run measures and how.
type Settings struct {
	// Sizes are the service counts, one row per size and mode.
	Sizes []int
	Modes []Mode
	// Proxies are the proxies each row runs, in this order (both, unless
	// checking one side of the harness alone).
	Proxies []Proxy
	// KubeProxyBudget bounds kube-proxy's first full sync, KproxyBudget
	// kproxy's; a sync still running then is reported as over budget, and
	// that proxy's other numbers in the row are not measured.
	KubeProxyBudget, KproxyBudget time.Duration
	// MinSyncPeriod is --iptables-min-sync-period (which kube-proxy's
	// nftables mode takes too), the same for both.
	MinSyncPeriod time.Duration
	// NPLRepeats is how many new services the network programming latency
	// is the median of.
	NPLRepeats int
	// LogDir, when set, keeps the proxies' logs; KproxyFlags are extra
	// kproxy flags (see LogDirEnv, KproxyFlagsEnv).
	LogDir      string
	KproxyFlags []string
}

// DefaultSettings are the table's sizes up to 5,000 in every mode, kube-proxy's
// own minimum sync period, and a kube-proxy budget that keeps a default run
// within about half an hour.
func DefaultSettings() Settings {
	return Settings{
		Sizes:           []int{100, 1000, 5000},
		Modes:           Modes(),
		Proxies:         []Proxy{Kproxy, KubeProxy},
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
	modesVar := ModesEnv
	if getenv(ModesEnv) == "" && getenv(BackendsEnv) != "" {
		modesVar = BackendsEnv
	} else if getenv(BackendsEnv) != "" {
		errs = append(errs, fmt.Sprintf("%s and %s are both set: %s is its older name, set %s only", ModesEnv, BackendsEnv, BackendsEnv, ModesEnv))
	}
	if v := getenv(modesVar); v != "" {
		modes, err := parseModes(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q: %v", modesVar, v, err))
		}
		s.Modes = modes
	}
	if v := getenv(ProxiesEnv); v != "" {
		proxies, err := parseProxies(v)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q: %v", ProxiesEnv, v, err))
		}
		s.Proxies = proxies
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
	s.LogDir = getenv(LogDirEnv)
	if v := getenv(KproxyFlagsEnv); v != "" {
		s.KproxyFlags = strings.Fields(v)
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

// RowSpec is one row of the table: a mode and a service count.
type RowSpec struct {
	Mode     Mode
	Services int
}

// Name is the row's sub-benchmark name, such as "nftables-5000".
func (r RowSpec) Name() string { return fmt.Sprintf("%s-%d", r.Mode, r.Services) }

// Rows lists the rows in run order: size by size, every mode at one size
// before the next, so an interrupted run has compared the modes on the
// sizes it finished.
func (s Settings) Rows() []RowSpec {
	var rows []RowSpec
	for _, n := range s.Sizes {
		for _, m := range s.Modes {
			rows = append(rows, RowSpec{Mode: m, Services: n})
		}
	}
	return rows
}

// TableSpecs lists the rows in display order: mode by mode, sizes
// ascending within each.
func (s Settings) TableSpecs() []RowSpec {
	var specs []RowSpec
	for _, m := range s.Modes {
		for _, n := range s.Sizes {
			specs = append(specs, RowSpec{Mode: m, Services: n})
		}
	}
	return specs
}

// Runs says whether the rows run proxy p.
func (s Settings) Runs(p Proxy) bool { return slices.Contains(s.Proxies, p) }

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
	modes := make([]string, len(s.Modes))
	for i, m := range s.Modes {
		modes[i] = string(m)
	}
	proxies := make([]string, len(s.Proxies))
	for i, p := range s.Proxies {
		proxies[i] = string(p)
	}
	desc := fmt.Sprintf("sizes %s, modes %s, proxies %s, kube-proxy budget %v, kproxy budget %v, --iptables-min-sync-period=%v, %d new services for network programming latency",
		strings.Join(sizes, ","), strings.Join(modes, ","), strings.Join(proxies, ","), s.KubeProxyBudget, s.KproxyBudget, s.MinSyncPeriod, s.NPLRepeats)
	if len(s.KproxyFlags) > 0 {
		desc += fmt.Sprintf(", extra kproxy flags %q (diagnostics)", s.KproxyFlags)
	}
	return desc
}
