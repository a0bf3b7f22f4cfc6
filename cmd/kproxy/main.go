// Command kproxy is a drop-in replacement for kube-proxy: it accepts the same
// flags and --config file and programs the node so that Service virtual IPs
// and NodePorts reach their endpoints.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/validation/field"
	apiversion "k8s.io/apimachinery/pkg/version"
	"k8s.io/component-base/featuregate"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json, as kube-proxy
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/cmd/kproxy/app"
	"kproxy.dev/kproxy/cmd/kproxy/options"
	"kproxy.dev/kproxy/sync/buildinfo"
	"kproxy.dev/kproxy/sync/serve/debugz"
)

const longHelp = `kproxy runs on every node and makes Kubernetes Services work there: it
watches Services and EndpointSlices (from a cluster through --kubeconfig or
--master, or from a manifest file or directory through --services-file) and
programs the node so that traffic to a Service's cluster IP, external IPs,
load-balancer IPs and node ports reaches one of its ready endpoints.

It accepts kube-proxy's flags and its --config file (a
kubeproxy.config.k8s.io/v1alpha1 KubeProxyConfiguration). As in kube-proxy,
the file replaces the flags that are settings: next to --config only
--hostname-override, --master, --services-file and the logging flags apply,
and the others given are ignored with one warning.

Proxy modes (--proxy-mode):
  userspace  iptables "portal" rules redirect Service traffic to kproxy,
             which relays TCP (splice), UDP and SCTP to an endpoint. For
             nodes whose kernels lack IPVS or the NAT modules DNAT needs.
  iptables   kube-proxy's DNAT rule model: packets go straight from the
             kernel to an endpoint.
  ipvs       the kernel's IPVS load balancer, with iptables for the rest.
  nftables   kube-proxy's nftables ruleset (table kube-proxy, families ip
             and ip6).
When --proxy-mode is empty kproxy uses iptables if usable, else userspace.
--cleanup removes what any of the four modes (or kube-proxy's) installed.`

// deps are the parts of a run that tests replace: starting kproxy,
// cleaning up, reading the OS hostname and applying the logging
// configuration (process-wide, so once per process).
type deps struct {
	run      func(ctx context.Context, cfg *options.Config, dbg app.Debug) error
	cleanup  func(ctx context.Context, cfg *options.Config) error
	hostname func() (string, error)
	logging  func(lc *logsapi.LoggingConfiguration, gates featuregate.FeatureGate) error
}

// applyLogging switches klog to the configuration, as kube-proxy does
// after reading its flags and --config.
func applyLogging(lc *logsapi.LoggingConfiguration, gates featuregate.FeatureGate) error {
	logs.InitLogs()
	return logsapi.ValidateAndApplyAsField(lc, gates, field.NewPath("logging"))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	// After the first signal, restore the default handling so a second one
	// kills a shutdown that hangs.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, deps{
		run:      app.RunWithDebug,
		cleanup:  func(ctx context.Context, cfg *options.Config) error { return app.Cleanup(ctx, cfg) },
		hostname: os.Hostname,
		logging:  applyLogging,
	})
	stop()
	logs.FlushLogs()
	os.Exit(code)
}

// run executes the command line and returns the process exit code, printing
// any error to stderr.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, d deps) int {
	cmd := newRootCommand(d)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	if err := cmd.ExecuteContext(ctx); err != nil {
		fmt.Fprintf(stderr, "Error: %v\n", err)
		return 1
	}
	return 0
}

// newRootCommand builds the kproxy command with all flags registered.
func newRootCommand(d deps) *cobra.Command {
	opts := options.NewOptions()
	logFlags := logsapi.NewLoggingConfiguration()
	version := newVersionFlag(buildinfo.Get())
	if d.hostname != nil {
		opts.Hostname = d.hostname
	}
	cmd := &cobra.Command{
		Use:   "kproxy",
		Short: "kproxy: a kube-proxy replacement that routes Service traffic on a node",
		Long:  longHelp,
		// Errors are printed once, by run; usage after a runtime failure
		// only hides the message.
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%q takes no arguments, got %q", cmd.CommandPath(), args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			// First, as in kube-proxy: --version prints even next to a
			// --config that does not load.
			switch version.value {
			case "true":
				fmt.Fprintf(cmd.OutOrStdout(), "kproxy version %s\n", buildinfo.String(version.info))
				return nil
			case "raw":
				fmt.Fprintf(cmd.OutOrStdout(), "%#v\n", version.info)
				return nil
			}
			cfg, err := opts.Complete(cmd.Flags())
			if err != nil {
				return err
			}
			// What Complete validated, in file form: the logging section
			// and /configz come from it.
			eff, _, err := opts.Effective(cmd.Flags())
			if err != nil {
				return err
			}
			lc, gates, err := loggingConfiguration(opts.ConfigFile != "", eff, cmd.Flags(), logFlags, cfg.FeatureGates)
			if err != nil {
				return err
			}
			if d.logging != nil {
				if err := d.logging(lc, gates); err != nil {
					return fmt.Errorf("initialize logging: %w", err)
				}
			}
			printFlags(cmd.Flags())
			// The logging section in force, as kube-proxy writes and
			// serves it: the flags', or the file's with the flags over it.
			eff.Logging = *lc
			ctx := cmd.Context()
			logger := klog.FromContext(ctx)
			switch {
			case cfg.WriteConfigTo != "":
				if err := options.WriteFile(cfg.WriteConfigTo, options.AsKubeProxyWrites(eff)); err != nil {
					return fmt.Errorf("--write-config-to %s: %w", cfg.WriteConfigTo, err)
				}
				logger.Info("Wrote configuration", "file", cfg.WriteConfigTo)
				return nil
			case cfg.Cleanup:
				if err := d.cleanup(ctx, cfg); err != nil {
					return fmt.Errorf("cleanup: %w", err)
				}
				return nil
			default:
				logger.Info("Starting kproxy", "version", buildinfo.String(version.info), "mode", cfg.Mode, "node", cfg.NodeName)
				if err := checkBadConfig(eff); err != nil {
					logger.Error(err, "Kube-proxy configuration may be incomplete or incorrect")
				}
				dbg, err := debugPages(eff, cmd.Flags(), cfg.FeatureGates)
				if err != nil {
					return err
				}
				return d.run(ctx, cfg, dbg)
			}
		},
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())
	})

	cmd.AddCommand(newServicesCommand())
	// A subcommand brings cobra's completion command; kproxy has none.
	cmd.CompletionOptions.DisableDefaultCmd = true

	fs := cmd.Flags()
	opts.AddFlags(fs)
	fs.Var(version, "version", "--version, --version=raw prints version information and quits; --version=vX.Y.Z... sets the reported version")
	fs.Lookup("version").NoOptDefVal = "true"
	// kube-proxy's logging flags: --logging-format, -v, --vmodule,
	// --log-flush-frequency and the --log-{text,json}-* options.
	logsapi.AddFlags(logFlags, fs)
	return cmd
}

// loggingConfiguration is the logging configuration kproxy runs with, as
// kube-proxy v1.36 builds it: the logging flags; with --config, the file's
// logging section with the logging flags given on the command line copied
// over it (their vmodule entries first). The feature gates the logging
// options need (LoggingAlphaOptions, LoggingBetaOptions, ContextualLogging)
// come from --feature-gates or the file's featureGates; other gates are not
// logging's business.
func loggingConfiguration(withConfig bool, eff *options.FileConfiguration, fs *pflag.FlagSet, fromFlags *logsapi.LoggingConfiguration, featureGates map[string]bool) (*logsapi.LoggingConfiguration, featuregate.FeatureGate, error) {
	gates := featuregate.NewFeatureGate()
	if err := logsapi.AddFeatureGates(gates); err != nil {
		return nil, nil, fmt.Errorf("logging feature gates: %w", err)
	}
	known := gates.GetAll()
	logging := map[string]bool{}
	for name, on := range featureGates {
		if _, ok := known[featuregate.Feature(name)]; ok {
			logging[name] = on
		}
	}
	if err := gates.SetFromMap(logging); err != nil {
		return nil, nil, fmt.Errorf("--feature-gates: %w", err)
	}
	if !withConfig {
		return fromFlags, gates, nil
	}
	lc := eff.Logging.DeepCopy()
	if err := copyLogsFromFlags(fs, lc); err != nil {
		return nil, nil, err
	}
	return lc, gates, nil
}

// copyLogsFromFlags copies the logging flags given on fs over to; vmodule
// entries of the flags come before the file's, so they win.
func copyLogsFromFlags(fs *pflag.FlagSet, to *logsapi.LoggingConfiguration) error {
	var clone pflag.FlagSet
	logsapi.AddFlags(to, &clone)
	fileVModule := to.VModule
	to.VModule = nil
	var errs []error
	clone.VisitAll(func(f *pflag.Flag) {
		given := fs.Lookup(f.Name)
		if given == nil || !given.Changed {
			return
		}
		if err := f.Value.Set(given.Value.String()); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", f.Name, err))
		}
	})
	to.VModule = append(to.VModule, fileVModule...)
	return errors.Join(errs...)
}

// debugPages builds what /configz, /flagz and /statusz show. As in
// kube-proxy v1.36, /flagz and /statusz are on unless --feature-gates (or
// the file's featureGates) turns ComponentFlagz or ComponentStatusz off.
func debugPages(eff *options.FileConfiguration, fs *pflag.FlagSet, featureGates map[string]bool) (app.Debug, error) {
	configz, err := debugz.Configz(options.AsKubeProxyShows(eff))
	if err != nil {
		return app.Debug{}, err
	}
	dbg := app.Debug{Configz: configz, Statusz: gateOn(featureGates, "ComponentStatusz")}
	if gateOn(featureGates, "ComponentFlagz") {
		dbg.Flagz = shownFlags(fs)
	}
	return dbg, nil
}

// shownFlags is every flag's value as /flagz and the -v=1 FLAG lines show
// it. kube-proxy's --detect-local-mode is bound to its configuration, whose
// defaulting (without --config) writes ClusterCIDR into it before either
// reads it; kproxy resolves an empty mode to ClusterCIDR later.
func shownFlags(fs *pflag.FlagSet) map[string]string {
	shown := debugz.Flags(fs)
	if config := fs.Lookup("config"); shown["detect-local-mode"] == "" && (config == nil || config.Value.String() == "") {
		shown["detect-local-mode"] = "ClusterCIDR"
	}
	return shown
}

// printFlags logs one line per flag at -v=1, as kube-proxy does
// (component-base's cliflag.PrintFlags), once logging is configured.
func printFlags(fs *pflag.FlagSet) {
	if !klog.V(1).Enabled() {
		return
	}
	shown := shownFlags(fs)
	fs.VisitAll(func(f *pflag.Flag) {
		klog.V(1).Infof("FLAG: --%s=%q", f.Name, shown[f.Name])
	})
}

// checkBadConfig is the part of kube-proxy's check of the same name that
// needs no Node: NodePorts open on every local IP unless nodePortAddresses
// limits them (the nftables mode's default, primary, does).
func checkBadConfig(eff *options.FileConfiguration) error {
	if len(eff.NodePortAddresses) == 0 && eff.Mode != "nftables" {
		return errors.New("nodePortAddresses is unset; NodePort connections will be accepted on all local IPs. Consider using `--nodeport-addresses primary`")
	}
	return nil
}

// gateOn reads a gate that is on by default.
func gateOn(gates map[string]bool, name string) bool {
	on, set := gates[name]
	return on || !set
}

// versionFlag is kube-proxy's --version, with component-base's verflag
// syntax: --version (or =true) prints the version and exits, =raw prints
// every build field, =vX.Y.Z sets the version reported (same major, minor
// and patch as the build), =false does nothing. verflag itself does not
// fit: it registers on the process-wide pflag.CommandLine, keeps the
// version in component-base's package state, reports Kubernetes's version
// rather than kproxy's and exits the process from inside the command.
type versionFlag struct {
	value string          // "false", "true", "raw" or the version set
	built apiversion.Info // what the build says
	info  apiversion.Info // what kproxy reports
}

func newVersionFlag(built apiversion.Info) *versionFlag {
	return &versionFlag{value: "false", built: built, info: built}
}

func (v *versionFlag) Set(s string) error {
	switch {
	case s == "raw":
		v.value = s
		return nil
	case strings.HasPrefix(s, "v"):
		info, err := buildinfo.WithVersion(v.built, s)
		if err != nil {
			return err
		}
		v.value, v.info = s, info
		return nil
	}
	on, err := strconv.ParseBool(s)
	if err != nil {
		return err
	}
	v.value = strconv.FormatBool(on)
	return nil
}

func (v *versionFlag) String() string { return v.value }

func (v *versionFlag) Type() string { return "version" }
