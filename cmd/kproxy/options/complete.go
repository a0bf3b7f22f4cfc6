package options

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Complete merges defaults, the --config file and the flags set explicitly
// on fs, validates the result and returns it. As in kube-proxy, the file
// replaces the flags that are settings: with --config only the flags
// honouredWithConfig lists (and logging, --help, --version) still apply, and
// the others given are reported in one warning. Warnings are logged through
// o.Logger and returned in Config.Warnings. fs must be the flag set AddFlags
// registered on, already parsed. Nothing here touches the kernel.
func (o *Options) Complete(fs *pflag.FlagSet) (*Config, error) {
	eff, warnings, err := o.Effective(fs)
	if err != nil {
		return nil, err
	}
	o.effective = eff
	from := origin{file: o.ConfigFile, changed: func(flag string) bool {
		return fs.Changed(flag) && (o.ConfigFile == "" || honouredWithConfig(flag))
	}}
	cfg, errs := resolve(eff, from)
	cfg.ConfigFile = o.ConfigFile
	cfg.WriteConfigTo = o.WriteConfigTo
	cfg.Cleanup = o.Cleanup
	cfg.InitOnly = o.InitOnly
	cfg.Master = o.master

	if cfg.ServicesFile != "" && cfg.Master != "" {
		errs = append(errs, fmt.Errorf("%s and --master are mutually exclusive: services come either from a manifest or from a cluster",
			from.describe(setting{"services-file", "servicesFile"})))
	}
	nodeName, err := o.nodeName(eff.HostnameOverride)
	if err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	cfg.NodeName = nodeName
	for _, name := range []string{"boot-id-file", "machine-id-file"} {
		if fs.Changed(name) {
			warnings = append(warnings, fmt.Sprintf("--%s has no effect: kube-proxy v1.36 accepts it (a cAdvisor flag) and reads no such file, and neither does kproxy", name))
		}
	}
	cfg.Warnings = warnings
	for _, w := range warnings {
		o.Logger.Info("Configuration warning", "warning", w)
	}
	return cfg, nil
}

// Effective returns the merged file-format configuration (what
// --write-config-to writes) without validating it, and the warnings reading
// it gave: a lenient decoding of the file, flags ignored next to --config.
func (o *Options) Effective(fs *pflag.FlagSet) (*FileConfiguration, []string, error) {
	eff := NewDefaultFileConfiguration()
	var warnings []string
	if o.ConfigFile != "" {
		loaded, fileWarnings, err := LoadFile(o.ConfigFile)
		if err != nil {
			return nil, nil, err
		}
		eff = loaded
		warnings = append(warnings, fileWarnings...)
	}
	if o.ConfigFile == "" {
		// Without --config kube-proxy v1.36 keeps one pair of sync periods,
		// defaulted from the iptables section's (30s, 1s), and sets it from
		// the --ipvs-* flags only when given: its IPVS mode then syncs at
		// most once a second, where the file's ipvs.minSyncPeriod
		// defaults to 0s.
		eff.IPVS.MinSyncPeriod.Duration = defaultMinSyncPeriod
	}
	overrides := flagOverrides()
	syntax := flagSyntax()
	var ignored []string
	var syntaxErrs []error
	fs.Visit(func(f *pflag.Flag) {
		apply, isSetting := overrides[f.Name]
		if f.Name == "healthz-port" || f.Name == "metrics-port" {
			isSetting = true
		}
		if !isSetting {
			return
		}
		if o.ConfigFile != "" && !honouredWithConfig(f.Name) {
			ignored = append(ignored, "--"+f.Name)
			if check, ok := syntax[f.Name]; ok {
				if err := check(f.Value.String()); err != nil {
					syntaxErrs = append(syntaxErrs, fmt.Errorf("invalid value %q for --%s: %w", f.Value.String(), f.Name, err))
				}
			}
			return
		}
		if apply != nil {
			apply(eff, o.fromFlags)
		}
	})
	if len(syntaxErrs) > 0 {
		// kube-proxy refuses these while parsing flags, --config or not.
		return nil, nil, errors.Join(syntaxErrs...)
	}
	if len(ignored) > 0 {
		warnings = append(warnings, fmt.Sprintf("ignoring flags given with --config %s, as kube-proxy does (the file sets them): %s",
			o.ConfigFile, strings.Join(ignored, " ")))
	}
	// A bare IP means the default port, whether it came from a flag or file.
	eff.HealthzBindAddress = appendPortIfNeeded(eff.HealthzBindAddress, defaultHealthzPort)
	eff.MetricsBindAddress = appendPortIfNeeded(eff.MetricsBindAddress, defaultMetricsPort)
	if fs.Changed("healthz-port") && o.ConfigFile == "" {
		eff.HealthzBindAddress = replacePort(eff.HealthzBindAddress, o.healthzPort)
	}
	if fs.Changed("metrics-port") && o.ConfigFile == "" {
		eff.MetricsBindAddress = replacePort(eff.MetricsBindAddress, o.metricsPort)
	}
	// Only a flag can leave an address empty (the file's defaulting fills
	// it in), so store "disabled" as port 0, which survives
	// --write-config-to and reading the file back.
	eff.HealthzBindAddress = cmp.Or(eff.HealthzBindAddress, replacePort("", 0))
	eff.MetricsBindAddress = cmp.Or(eff.MetricsBindAddress, replacePort("", 0))
	eff.DetectLocalMode = cmp.Or(eff.DetectLocalMode, defaultDetectLocalMode)
	return eff, warnings, nil
}

// nodeName mirrors kube-proxy: the override, else the OS hostname, trimmed
// and lowercased.
func (o *Options) nodeName(override string) (string, error) {
	name := strings.TrimSpace(override)
	if name == "" {
		if override != "" {
			return "", fmt.Errorf("invalid value %q for --hostname-override: must not be blank", override)
		}
		host, err := o.Hostname()
		if err != nil {
			return "", fmt.Errorf("getting the hostname for the node name (set --hostname-override): %w", err)
		}
		name = strings.TrimSpace(host)
		if name == "" {
			return "", errors.New("the OS hostname is empty: set --hostname-override")
		}
	}
	return strings.ToLower(name), nil
}

// replacePort applies the deprecated --healthz-port/--metrics-port to addr.
// Port 0 disables the server.
func replacePort(addr string, port int32) string {
	host := "0.0.0.0"
	if addr != "" {
		if h, _, err := net.SplitHostPort(addr); err == nil {
			host = h
		} else {
			host = addr
		}
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// WriteEffective writes the configuration the last successful Complete
// produced, in --config file format.
func (o *Options) WriteEffective(path string) error {
	if o.effective == nil {
		return errors.New("no configuration yet: Complete has not run")
	}
	return WriteFile(path, o.effective)
}
