package rules

import (
	"errors"
	"fmt"
	"net/netip"

	"kproxy.dev/kproxy/redirect/modes/kernelmode"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// Validate checks a Config; the error names every bad field.
func Validate(cfg Config) error {
	var errs []error
	if cfg.Family != ipfamily.IPv4 && cfg.Family != ipfamily.IPv6 {
		errs = append(errs, fmt.Errorf("unknown Family %q (want %s or %s)", cfg.Family, ipfamily.IPv4, ipfamily.IPv6))
		// Every address check below depends on the family.
		return errors.Join(errs...)
	}
	if cfg.MasqueradeBit < 0 || cfg.MasqueradeBit > 31 {
		errs = append(errs, fmt.Errorf("MasqueradeBit: %d is outside 0-31", cfg.MasqueradeBit))
	}
	errs = append(errs, checkPrefixes("ClusterCIDRs", cfg.ClusterCIDRs, cfg.Family)...)
	if cfg.BridgeInterface != "" && cfg.InterfaceNamePrefix != "" {
		errs = append(errs, errors.New("BridgeInterface and InterfaceNamePrefix are two detectors; set one"))
	}
	for field, name := range map[string]string{"BridgeInterface": cfg.BridgeInterface, "InterfaceNamePrefix": cfg.InterfaceNamePrefix} {
		if err := checkInterfaceName(name); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", field, err))
		}
	}
	errs = append(errs, checkPrefixes("NodePortAddresses", cfg.NodePortAddresses, cfg.Family)...)
	errs = append(errs, checkAddrs("NodeIPs", cfg.NodeIPs, cfg.Family)...)
	errs = append(errs, checkAddrs("InterfaceAddrs", cfg.InterfaceAddrs, cfg.Family)...)
	return errors.Join(errs...)
}

func checkPrefixes(field string, ps []netip.Prefix, fam ipfamily.Family) []error {
	var errs []error
	for i, p := range ps {
		switch {
		case !p.IsValid():
			errs = append(errs, fmt.Errorf("%s[%d]: not a valid prefix", field, i))
		case p.Addr().Is4In6():
			errs = append(errs, fmt.Errorf("%s[%d]: %s is an IPv4-mapped IPv6 prefix; write it as IPv4", field, i, p))
		case ipfamily.Of(p.Addr()) != fam:
			errs = append(errs, fmt.Errorf("%s[%d]: %s is not an %s prefix", field, i, p, fam))
		}
	}
	return errs
}

func checkAddrs(field string, as []netip.Addr, fam ipfamily.Family) []error {
	var errs []error
	for i, a := range as {
		switch {
		case !a.IsValid():
			errs = append(errs, fmt.Errorf("%s[%d]: not a valid address", field, i))
		case a.Zone() != "":
			errs = append(errs, fmt.Errorf("%s[%d]: %s has a zone, which iptables cannot match", field, i, a))
		case ipfamily.Of(a) != fam:
			errs = append(errs, fmt.Errorf("%s[%d]: %s is not an %s address", field, i, a, fam))
		}
	}
	return errs
}

// familyOf treats IPv4-mapped IPv6 addresses as IPv4, as the service map
// does (servicemap.IsIPv6).

// checkInterfaceName refuses what cannot be an interface name in an
// iptables -i match (empty is no detector).
func checkInterfaceName(name string) error {
	if len(name) >= 16 {
		return fmt.Errorf("%q is longer than an interface name (15)", name)
	}
	if kernelmode.NeedsQuotes(name) {
		return fmt.Errorf("%q has a character an interface name in a rule cannot carry unquoted", name)
	}
	return nil
}
