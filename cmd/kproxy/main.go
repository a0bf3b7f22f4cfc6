// Command kproxy is a drop-in replacement for kube-proxy: it accepts the same
// flags and --config file and programs the node so that Service virtual IPs
// and NodePorts reach their endpoints.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/cmd/kproxy/app"
	"kproxy.dev/kproxy/cmd/kproxy/options"
	"kproxy.dev/kproxy/sync/buildinfo"
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
When --proxy-mode is empty kproxy uses iptables if usable, else userspace.`

// deps are the parts of a run that tests replace: starting kproxy,
// cleaning up, and reading the OS hostname.
type deps struct {
	run      func(ctx context.Context, cfg *options.Config) error
	cleanup  func(ctx context.Context, cfg *options.Config) error
	hostname func() (string, error)
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	// After the first signal, restore the default handling so a second one
	// kills a shutdown that hangs.
	context.AfterFunc(ctx, stop)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, deps{
		run:      func(ctx context.Context, cfg *options.Config) error { return app.Run(ctx, cfg) },
		cleanup:  func(ctx context.Context, cfg *options.Config) error { return app.Cleanup(ctx, cfg) },
		hostname: os.Hostname,
	})
	stop()
	klog.Flush()
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
		Version:       buildinfo.String(buildinfo.Get()),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("%q takes no arguments, got %q", cmd.CommandPath(), args)
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := opts.Complete(cmd.Flags())
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			logger := klog.FromContext(ctx)
			switch {
			case cfg.WriteConfigTo != "":
				if err := opts.WriteEffective(cfg.WriteConfigTo); err != nil {
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
				logger.Info("Starting kproxy", "version", cmd.Version, "mode", cfg.Mode, "node", cfg.NodeName)
				return d.run(ctx, cfg)
			}
		},
	}
	cmd.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w (see '%s --help')", err, c.CommandPath())
	})

	fs := cmd.Flags()
	opts.AddFlags(fs)
	// klog registers -v, --vmodule and friends on a Go flag set; pflag
	// exposes a one-letter Go flag as both -v and --v.
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.AddGoFlagSet(klogFlags)
	return cmd
}
