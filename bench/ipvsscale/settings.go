package ipvsscale

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"kproxy.dev/kproxy/bench/guest"
)

// Environment variables that shape a run. They reach the guest too (its
// program gets the host's environment).
const (
	// SizesEnv lists the service-port counts, e.g. "1000,10000".
	SizesEnv = "KPROXY_IPVSSCALE_SIZES"
	// ChangesEnv is how many one-endpoint-change syncs the table's guest
	// run averages (its -test.benchtime, as Nx).
	ChangesEnv = "KPROXY_IPVSSCALE_CHANGES"
	// GuestMemEnv is the guest's RAM for the table's guest run.
	GuestMemEnv = "KPROXY_IPVSSCALE_GUEST_MEM"
)

// Settings are what a run measures.
type Settings struct {
	Sizes    []int
	Changes  int
	GuestMem string
}

// DefaultSettings are the IPVS issue's sizes.
func DefaultSettings() Settings {
	return Settings{Sizes: []int{1000, 10000}, Changes: 20, GuestMem: guest.DefaultMem}
}

// SettingsFromEnv returns DefaultSettings changed by the environment, as
// read by getenv; every bad value is reported, naming its variable.
func SettingsFromEnv(getenv func(string) string) (Settings, error) {
	s := DefaultSettings()
	var errs []error
	if v := getenv(SizesEnv); v != "" {
		sizes, err := parseSizes(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", SizesEnv, v, err))
		}
		s.Sizes = sizes
	}
	if v := getenv(ChangesEnv); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			errs = append(errs, fmt.Errorf("%s=%q: want a whole number of syncs, at least 1", ChangesEnv, v))
		}
		s.Changes = n
	}
	if v := getenv(GuestMemEnv); v != "" {
		s.GuestMem = v // guest.Run checks it
	}
	return s, errors.Join(errs...)
}

func parseSizes(v string) ([]int, error) {
	var sizes []int
	for f := range strings.SplitSeq(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("size %q is not a number", f)
		}
		w := Workload{Ports: n, Endpoints: EndpointsPerPort}
		if err := w.Validate(); err != nil {
			return nil, err
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// String is "sizes 1000,10000; 20 change syncs; guest RAM 512M".
func (s Settings) String() string {
	sizes := make([]string, len(s.Sizes))
	for i, n := range s.Sizes {
		sizes[i] = strconv.Itoa(n)
	}
	return fmt.Sprintf("sizes %s; %d change syncs; guest RAM %s", strings.Join(sizes, ","), s.Changes, s.GuestMem)
}
