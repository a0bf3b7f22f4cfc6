// Package app runs kproxy: resolve the settings, detect what the kernel can
// do, pick a mode from the registry, build it, and run it with a source,
// the service map and the health and metrics servers. It knows no mode's
// internals: each mode's package says what it needs (contract.Definition).
package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/cmd/kproxy/options"
	"kproxy.dev/kproxy/redirect/cleanup"
	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/redirect/modes"
	"kproxy.dev/kproxy/redirect/modes/contract"
	"kproxy.dev/kproxy/sync/buildinfo"
	"kproxy.dev/kproxy/sync/engine"
	"kproxy.dev/kproxy/sync/ipfamily"
	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/serve/debugz"
	"kproxy.dev/kproxy/sync/serve/healthz"
	"kproxy.dev/kproxy/sync/serve/servicehealth"
	"kproxy.dev/kproxy/sync/serve/serviceview"
	"kproxy.dev/kproxy/sync/servicemap"
	"kproxy.dev/kproxy/sync/sysctl"
)

// Debug is what the metrics server's debugging pages show; the command
// builds it from its flags and effective configuration.
type Debug struct {
	// Configz is /configz (debugz.Configz); nil serves the resolved Config.
	Configz []byte
	// Flagz is /flagz; nil serves none.
	Flagz map[string]string
	// Statusz serves /statusz.
	Statusz bool
}

// Run starts kproxy without Debug pages beyond the resolved Config.
func Run(ctx context.Context, cfg *options.Config) error { return RunWithDebug(ctx, cfg, Debug{}) }

// RunWithDebug starts kproxy and returns when ctx is cancelled or a part
// fails. Everything that can be checked is checked before the kernel is
// touched.
func RunWithDebug(ctx context.Context, cfg *options.Config, dbg Debug) error {
	if cfg.InitOnly {
		return initOnly(ctx, cfg)
	}
	logger := klog.FromContext(ctx).WithValues("node", cfg.NodeName)

	settings := cfg.ModeSettings()
	features, def, err := chooseMode(ctx, logger, cfg)
	if err != nil {
		return err
	}
	name := def.Name

	periods := def.SyncPeriods(settings)
	minSync, syncPeriod := periods.Min, periods.Max
	metricFams := metricFamilies(features)
	m := metrics.New(metricFams...)
	m.InstallClientGo() // before any client exists
	gates, err := cfg.FeatureGate()
	if err != nil {
		return err
	}
	m.RecordFeatureGates(gates) // as kube-proxy: once, at start
	health := healthz.New(2*syncPeriod, m, nil)

	// Bound with the metrics server now, given what it shows once the
	// mode and the engine run.
	services := &serviceview.Handler{}
	servers, err := listen(logger, cfg, name, health, m, dbg, services)
	if err != nil {
		if be := (*bindError)(nil); errors.As(err, &be) {
			reportBindFailure(ctx, logger, cfg, be)
		}
		return err
	}
	defer servers.close()

	// The tracker and the engine need each other: the tracker's change
	// callback notifies the engine, which reads snapshots from the tracker.
	var eng *engine.Engine
	tracker := servicemap.NewTracker(cfg.NodeName, func() { eng.Notify() })
	if !cfg.FeatureEnabled("AllowServiceExternalIPs") {
		tracker.IgnoreExternalIPs()
	}
	src, err := newSource(ctx, cfg, tracker, m)
	if err != nil {
		return err
	}
	eventsCtx, stopEvents := context.WithCancel(ctx)
	defer stopEvents()
	events := newNodeEvents(eventsCtx, logger, src.client, cfg.NodeName)

	// Nothing above touched the kernel; from here on kproxy owns the node's
	// proxy state, so leftovers of the other modes go first.
	if err := cleanup.Clean(ctx, features, modes.CleanupScope(name)); err != nil {
		logger.Error(err, "Removing leftovers of other proxy modes failed; carrying on", "keep", name)
	}

	applyOOMScoreAdj(logger, cfg.OOMScoreAdj)
	// Before the mode is built: a mode may read back what this sets
	// (nf_conntrack_tcp_be_liberal). A node without nf_conntrack (local
	// portals) has nothing to tune or clean: one line says so.
	if features.Conntrack.Present {
		tuneConntrack(logger, cfg.Conntrack)
	} else {
		logger.Info("nf_conntrack is absent: conntrack tuning and stale-flow cleanup are off", "detail", features.Conntrack.Detail)
	}

	// Before the mode, so its release runs after the mode has stopped.
	var observers []engine.SyncObserver
	if features.Conntrack.Present {
		var closeObservers func()
		observers, closeObservers = conntrackObservers(logger, def.Conntrack, m, syncPeriod)
		defer closeObservers()
	}

	proxyMode, err := def.New(ctx, settings, contract.Deps{Features: features, Registry: m.Registry(), Sysctls: sysctl.Proc{}, Logger: logger})
	if err != nil {
		return fmt.Errorf("starting the %s mode: %w", name, err)
	}
	defer func() {
		if err := proxyMode.Close(); err != nil {
			logger.Error(err, "Stopping the proxy mode")
		}
	}()

	if r, ok := proxyMode.(mode.ConflictReporter); ok {
		health.ReportPortalConflicts(r)
	}

	svcHealth := servicehealth.New(servicehealth.Config{
		Addresses:    listenAddresses(logger, settings),
		ProxyHealthy: func() bool { return health.Status().Healthy && health.NodeEligible() },
		OpenFailed:   events.serviceHealthCheckFailed,
		Logger:       logger,
	})
	defer svcHealth.Close()

	observers = append(observers, metrics.NoLocalEndpointsObserver{Metrics: m, NodeName: cfg.NodeName, Families: metricFams})

	eng, err = engine.New(engine.Config{
		Map: tracker, Mode: proxyMode, Metrics: m, Health: health,
		MinSyncPeriod: minSync, SyncPeriod: syncPeriod, ServiceHealth: svcHealth, Observers: observers,
	})
	if err != nil {
		return fmt.Errorf("setting up the sync engine: %w", err)
	}
	describer, _ := proxyMode.(mode.Describer)
	services.Attach(serviceview.Source{Mode: name, Node: cfg.NodeName, InForce: eng.InForce, Programmed: describer})

	// kube-proxy exits when its --config file changes, so the DaemonSet
	// restarts it on the new configuration; so does kproxy.
	var watch *configWatch
	if cfg.ConfigFile != "" {
		if watch, err = watchConfigFile(cfg.ConfigFile); err != nil {
			return err
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(servers.list)+3)
	// Every part runs until ctx ends; one that stops before is a failure
	// that stops kproxy, even if it stopped without an error.
	goFn := func(what string, fn func(context.Context) error) {
		go func() {
			err := fn(ctx)
			switch {
			case ctx.Err() != nil:
				errs <- nil
			case err == nil:
				errs <- fmt.Errorf("%s stopped unexpectedly", what)
			default:
				errs <- fmt.Errorf("%s: %w", what, err)
			}
		}()
	}
	running := 0
	for _, s := range servers.list {
		goFn("serving "+s.what, s.serve)
		running++
	}
	goFn("service source", src.Run)
	goFn("sync engine", func(ctx context.Context) error { eng.Run(ctx); return nil })
	running += 2
	if watch != nil {
		goFn("config file watch", watch.run)
		running++
	}
	// kube-proxy's events on its Node: its birth cry once the sources run.
	events.modeChosen(logger, name)
	events.started()

	logger.Info("kproxy started", "mode", name, "source", src.describe, "minSyncPeriod", minSync, "syncPeriod", syncPeriod)
	var firstErr error
	select {
	case <-ctx.Done():
	case firstErr = <-errs:
		running--
	}
	cancel()
	for ; running > 0; running-- {
		if err := <-errs; err != nil && firstErr == nil {
			firstErr = err
		}
	}
	if firstErr != nil {
		return firstErr
	}
	logger.Info("kproxy stopped")
	return nil
}

// chooseMode detects what the kernel can do and picks the mode cfg asks
// for, or the one the kernel best supports when it asks for none.
func chooseMode(ctx context.Context, logger klog.Logger, cfg *options.Config) (kernel.Features, contract.Definition, error) {
	// Only the IPVS mode's probes load its modules (ip_vs, ip_set, dummy).
	features := kernel.Detect(ctx, cfg.Mode == mode.IPVS)
	logger.V(2).Info("Kernel features", "features", features.String())
	def, reason, err := modes.Choose(string(cfg.Mode), features)
	if err != nil {
		return features, def, err
	}
	logger.Info("Using proxy mode", "mode", def.Name, "reason", reason)
	return features, def, nil
}

// Cleanup removes everything any mode may have installed (--cleanup).
func Cleanup(ctx context.Context, cfg *options.Config) error {
	// Leftovers of the IPVS mode exist only where its modules are loaded.
	features := kernel.Detect(ctx, false)
	if err := cleanup.Clean(ctx, features, modes.CleanupScope("")); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	klog.FromContext(ctx).Info("Removed everything kproxy and kube-proxy modes install")
	return nil
}

// metricFamilies are the ip_family label values of the metrics a sync
// reports for every family: the families the node's iptables can program,
// as kube-proxy runs one proxier per such family; IPv4 when none can.
func metricFamilies(f kernel.Features) []ipfamily.Family {
	var fams []ipfamily.Family
	for _, fam := range ipfamily.All() {
		if f.Chosen(fam).Usable {
			fams = append(fams, fam)
		}
	}
	if len(fams) == 0 {
		fams = []ipfamily.Family{ipfamily.IPv4}
	}
	return fams
}

// listenAddresses is where health-check node ports listen: like NodePorts,
// on the addresses --nodeport-addresses admits, or everywhere. It is asked
// at every sync, so "primary" follows the Node object as NodePorts do.
func listenAddresses(logger klog.Logger, s contract.Settings) func(*servicemap.NodeInfo) []netip.Addr {
	return func(node *servicemap.NodeInfo) []netip.Addr {
		if !s.NodePorts.Primary && len(s.NodePorts.CIDRs) == 0 {
			return nil // every address: nothing to list
		}
		local, err := kernel.InterfaceAddresses()
		if err != nil {
			logger.Info("Could not list the node's addresses; health-check node ports listen everywhere", "err", err)
			return nil
		}
		return s.NodePorts.ListenAddresses(node, local)
	}
}

// applyOOMScoreAdj protects kproxy from the OOM killer as kube-proxy does
// (--oom-score-adj, default -999). Failing to is worth a warning, not a stop.
func applyOOMScoreAdj(logger klog.Logger, score int32) {
	if err := os.WriteFile("/proc/self/oom_score_adj", []byte(strconv.Itoa(int(score))), 0); err != nil {
		logger.Info("Could not set the OOM score adjustment; carrying on", "oomScoreAdj", score, "err", err)
	}
}

// bindFailureEventWait bounds how long a start that failed to bind waits
// for its event to reach the API server.
const bindFailureEventWait = 5 * time.Second

// reportBindFailure records kube-proxy's event for a server that could not
// bind with --bind-address-hard-fail on the Node, when kproxy reads a
// cluster. The ports are bound before the sources start, so the client is
// made here for this one event; failing to make it only costs the event.
func reportBindFailure(ctx context.Context, logger klog.Logger, cfg *options.Config, be *bindError) {
	if cfg.ServicesFile != "" {
		return
	}
	client, err := newClient(cfg)
	if err != nil {
		logger.Error(err, "Cannot record the bind failure on the Node")
		return
	}
	ctx, cancel := context.WithTimeout(ctx, bindFailureEventWait)
	defer cancel()
	newNodeEvents(ctx, logger, client, cfg.NodeName).bindFailed(ctx, be)
}

// listen binds the health and metrics ports up front, so that a port in
// use is known before anything starts: with --bind-address-hard-fail it
// fails the start, else it is logged and retried in the background while
// kproxy proxies, as kube-proxy does.
func listen(logger klog.Logger, cfg *options.Config, name mode.Name, health *healthz.Health, m *metrics.Metrics, dbg Debug, services http.Handler) (*serverSet, error) {
	set := &serverSet{logger: logger, hardFail: cfg.BindAddressHardFail}
	if cfg.HealthzBindAddress != "" {
		err := set.add("healthz", "--healthz-bind-address", cfg.HealthzBindAddress, func() (*healthz.Server, error) {
			return healthz.NewHealthServer(cfg.HealthzBindAddress, health)
		})
		if err != nil {
			return nil, err
		}
	}
	if cfg.MetricsBindAddress != "" {
		configz := dbg.Configz
		if configz == nil {
			var err error
			if configz, err = json.Marshal(cfg); err != nil {
				set.close()
				return nil, fmt.Errorf("encoding the configuration for /configz: %w", err)
			}
		}
		var status *debugz.Status
		if dbg.Statusz {
			status = &debugz.Status{Started: time.Now(), BinaryVersion: strings.TrimPrefix(buildinfo.Get().GitVersion, "v")}
		}
		err := set.add("metrics", "--metrics-bind-address", cfg.MetricsBindAddress, func() (*healthz.Server, error) {
			return healthz.NewMetricsServer(healthz.MetricsServerConfig{
				Address: cfg.MetricsBindAddress, Metrics: m, ProxyMode: name, Configz: configz,
				Component: "kproxy", Flagz: dbg.Flagz, Statusz: status, Profiling: cfg.EnableProfiling,
				Services: services,
			})
		})
		if err != nil {
			return nil, err
		}
	}
	return set, nil
}
