package options

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	"github.com/spf13/pflag"
)

// Complete merges defaults, the --config file and the flags set explicitly
// on fs (in that order of precedence), validates the result and returns it.
// fs must be the flag set AddFlags registered on, already parsed. Nothing
// here touches the kernel.
func (o *Options) Complete(fs *pflag.FlagSet) (*Config, error) {
	eff, err := o.Effective(fs)
	if err != nil {
		return nil, err
	}
	o.effective = eff
	from := origin{file: o.ConfigFile, changed: fs.Changed}
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
	return cfg, nil
}

// Effective returns the merged file-format configuration (what
// --write-config-to writes) without validating it.
func (o *Options) Effective(fs *pflag.FlagSet) (*FileConfiguration, error) {
	eff := NewDefaultFileConfiguration()
	if o.ConfigFile != "" {
		loaded, err := LoadFile(o.ConfigFile)
		if err != nil {
			return nil, err
		}
		eff = loaded
	}
	overrides := flagOverrides()
	fs.Visit(func(f *pflag.Flag) {
		if apply, ok := overrides[f.Name]; ok {
			apply(eff, o.fromFlags)
		}
	})
	// A bare IP means the default port, whether it came from a flag or file.
	eff.HealthzBindAddress = appendPortIfNeeded(eff.HealthzBindAddress, defaultHealthzPort)
	eff.MetricsBindAddress = appendPortIfNeeded(eff.MetricsBindAddress, defaultMetricsPort)
	if fs.Changed("healthz-port") {
		eff.HealthzBindAddress = replacePort(eff.HealthzBindAddress, o.healthzPort)
	}
	if fs.Changed("metrics-port") {
		eff.MetricsBindAddress = replacePort(eff.MetricsBindAddress, o.metricsPort)
	}
	// Only a flag can leave an address empty (the file's defaulting fills
	// it in), so store "disabled" as port 0, which survives
	// --write-config-to and reading the file back.
	if eff.HealthzBindAddress == "" {
		eff.HealthzBindAddress = replacePort("", 0)
	}
	if eff.MetricsBindAddress == "" {
		eff.MetricsBindAddress = replacePort("", 0)
	}
	if eff.DetectLocalMode == "" {
		eff.DetectLocalMode = defaultDetectLocalMode
	}
	return eff, nil
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
