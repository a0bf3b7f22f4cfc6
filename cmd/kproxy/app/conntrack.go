package app

import (
	"context"
	"runtime"
	"time"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/cmd/kproxy/options"
	"kproxy.dev/kproxy/conntrack"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/engine"
	"kproxy.dev/kproxy/sync/metrics"
)

// tuneConntrack applies the --conntrack-* settings as kube-proxy does at
// start. What cannot be set (a read-only /proc/sys, nf_conntrack_max inside
// a network namespace) is one warning; nothing else depends on it.
func tuneConntrack(logger klog.Logger, cfg options.ConntrackConfig) {
	changes, err := conntrack.Tune(conntrack.Params{}, conntrack.Settings{
		MaxPerCore:            int(cfg.MaxPerCore),
		Min:                   int(cfg.Min),
		TCPEstablishedTimeout: cfg.TCPEstablishedTimeout,
		TCPCloseWaitTimeout:   cfg.TCPCloseWaitTimeout,
		TCPBeLiberal:          cfg.TCPBeLiberal,
		UDPTimeout:            cfg.UDPTimeout,
		UDPStreamTimeout:      cfg.UDPStreamTimeout,
	}, runtime.NumCPU())
	for _, c := range changes {
		logger.Info("Set conntrack parameter", "parameter", c.Path, "value", c.New, "previous", c.Old)
	}
	if err != nil {
		logger.Info("Warning: some conntrack settings could not be applied; carrying on without them", "err", err)
	}
}

// conntrackObservers returns the sync observer that deletes stale conntrack
// flows after each sync, judged by how the mode's traffic passes conntrack
// (dp), and a function to call once the mode has stopped, which releases
// it. Not being able to clean up is a warning, not a reason to stop.
//
// Reconciliation is due after half the mode's sync period, so every
// periodic sync reconciles however its timing jitters, and busier times
// reconcile no more than twice per period.
func conntrackObservers(logger klog.Logger, dp conntrack.Dataplane, m *metrics.Metrics, syncPeriod time.Duration) ([]engine.SyncObserver, func()) {
	table, err := conntrack.NewNetlinkTable()
	if err != nil {
		logger.Info("Warning: stale UDP flows will not be cleaned from conntrack", "err", err)
		return nil, func() {}
	}
	cleaner, err := conntrack.New(conntrack.Config{
		Table: table, Dataplane: dp, LocalAddresses: kernel.InterfaceAddresses,
		ReconcileInterval: syncPeriod / 2, Registerer: m.Registry(),
	})
	if err != nil {
		_ = table.Close()
		logger.Info("Warning: stale UDP flows will not be cleaned from conntrack", "err", err)
		return nil, func() {}
	}
	return []engine.SyncObserver{cleaner}, func() {
		// The relays are gone by now: their flows go too (a no-op for the
		// kernel modes).
		if n, err := cleaner.DataplaneStopped(klog.NewContext(context.Background(), logger)); err != nil {
			logger.Error(err, "Deleting the stopped relays' conntrack flows")
		} else if n > 0 {
			logger.Info("Deleted the stopped relays' conntrack flows", "flows", n)
		}
		_ = table.Close()
	}
}
