package app

import (
	"context"
	"fmt"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/cmd/kproxy/options"
	"kproxy.dev/kproxy/redirect/cleanup"
	"kproxy.dev/kproxy/redirect/modes"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/sysctl"
)

// initOnly is --init-only: the node set-up that needs full root privileges,
// then exit without syncing, as kube-proxy v1.36 does (it removes the other
// modes' leftovers, sets the conntrack sysctls, builds its proxier, which
// sets the mode's sysctls, and returns before the first sync). kproxy
// does the same steps as Run up to building the mode, then the mode's own
// Init (mode.Initializer). No API server is needed, and no port is bound.
func initOnly(ctx context.Context, cfg *options.Config) error {
	logger := klog.FromContext(ctx).WithValues("node", cfg.NodeName)
	features, def, err := chooseMode(ctx, logger, cfg)
	if err != nil {
		return err
	}
	if err := cleanup.Clean(ctx, features, modes.CleanupScope(def.Name)); err != nil {
		logger.Error(err, "Removing leftovers of other proxy modes failed; carrying on", "keep", def.Name)
	}
	if features.Conntrack.Present {
		tuneConntrack(logger, cfg.Conntrack)
	}
	m, err := def.New(ctx, cfg.ModeSettings(), contract.Deps{Features: features, Registry: metrics.New().Registry(),
		Sysctls: sysctl.Proc{}, Logger: logger})
	if err != nil {
		return fmt.Errorf("setting up the %s mode: %w", def.Name, err)
	}
	defer func() {
		if err := m.Close(); err != nil {
			logger.Error(err, "Stopping the proxy mode")
		}
	}()
	if in, ok := m.(mode.Initializer); ok {
		if err := in.Init(ctx); err != nil {
			return fmt.Errorf("setting up the %s mode: %w", def.Name, err)
		}
	}
	logger.Info("System initialized and --init-only specified")
	return nil
}
