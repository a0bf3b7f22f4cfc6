package healthz

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/metrics"
	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/serve/debugz"
	"kproxy.dev/kproxy/sync/serve/httplimit"
)

const (
	// DefaultHealthzAddress is kube-proxy's --healthz-bind-address default.
	DefaultHealthzAddress = "0.0.0.0:10256"
	// DefaultMetricsAddress is kube-proxy's --metrics-bind-address default.
	DefaultMetricsAddress = "127.0.0.1:10249"

	// shutdownGrace bounds how long in-flight requests may finish after the
	// context is cancelled.
	shutdownGrace = 5 * time.Second
)

// Server is an HTTP server already listening on its address.
type Server struct {
	name     string
	listener net.Listener
	srv      *http.Server
}

// listen binds addr at once, so a port in use is reported to the caller
// before anything is started. The server is hardened (httplimit): it
// listens on every address by default. boundedWrites is false where an
// answer may take long (pprof's profiles).
func listen(name, addr string, handler http.Handler, boundedWrites bool) (*Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s server: listening on %s: %w", name, addr, err)
	}
	limited := httplimit.Limit(ln, 0, 0)
	srv := &http.Server{Handler: handler}
	limited.Harden(srv, boundedWrites)
	return &Server{
		name:     name,
		listener: limited,
		srv:      srv,
	}, nil
}

// NewHealthServer listens on addr (DefaultHealthzAddress when empty) and
// will serve /healthz and /livez.
func NewHealthServer(addr string, h *Health) (*Server, error) {
	if h == nil {
		return nil, errors.New("health server: nil Health")
	}
	addr = cmp.Or(addr, DefaultHealthzAddress)
	mux := http.NewServeMux()
	mux.Handle("/healthz", h.HealthzHandler())
	mux.Handle("/livez", h.LivezHandler())
	return listen("healthz", addr, mux, true)
}

// MetricsServerConfig says what the metrics server exposes.
type MetricsServerConfig struct {
	// Address defaults to DefaultMetricsAddress.
	Address string
	Metrics *metrics.Metrics
	// ProxyMode is served as plain text at /proxyMode.
	ProxyMode mode.Name
	// Configz, when not nil, is served as JSON at /configz: the effective
	// configuration, already encoded (debugz.Configz).
	Configz []byte
	// Component names the program on /flagz and /statusz.
	Component string
	// Flagz, when not nil, is served at /flagz (debugz.FlagzHandler).
	Flagz map[string]string
	// Statusz, when not nil, is served at /statusz, listing the server's
	// other pages.
	Statusz *debugz.Status
	// Profiling serves net/http/pprof under /debug/pprof/ (--profiling).
	Profiling bool
	// Services, when not nil, is served at /services (sync/serve/serviceview):
	// the service map and what the mode programmed. Like /metrics' names,
	// it reveals the node's services to whoever reaches this address.
	Services http.Handler
}

// NewMetricsServer listens on the configured address and will serve
// /metrics, /metrics/slis, /healthz (a ping, as kube-proxy's), /proxyMode and, if given,
// /configz, /flagz, /services, /statusz and /debug/pprof/.
func NewMetricsServer(cfg MetricsServerConfig) (*Server, error) {
	if cfg.Metrics == nil {
		return nil, errors.New("metrics server: Metrics is required")
	}
	cfg.Address = cmp.Or(cfg.Address, DefaultMetricsAddress)
	mux := http.NewServeMux()
	mux.Handle("/metrics", cfg.Metrics.Handler())
	mux.Handle("/metrics/slis", cfg.Metrics.SLIHandler())
	// As kube-proxy: the generic ping here; the proxy's health and
	// liveness are on the healthz port.
	mux.Handle("/healthz", debugz.PingHealthz())
	mux.Handle("/healthz/ping", debugz.Ping())
	proxyMode := string(cfg.ProxyMode)
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = fmt.Fprint(w, proxyMode)
	})
	paths := []string{"/metrics", "/metrics/slis", "/healthz", "/proxyMode"}
	if cfg.Configz != nil {
		mux.Handle("/configz", debugz.ConfigzHandler(cfg.Configz))
		paths = append(paths, "/configz")
	}
	if cfg.Flagz != nil {
		mux.Handle("/flagz", debugz.FlagzHandler(cfg.Component, cfg.Flagz))
		paths = append(paths, "/flagz")
	}
	if cfg.Services != nil {
		// Unlisted on /statusz, whose list is kube-proxy's.
		mux.Handle("/services", cfg.Services)
	}
	if cfg.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		// kube-proxy's runtime verbosity switch; like pprof, unlisted
		// on /statusz there.
		mux.Handle("/debug/flags/v", debugz.VerbosityHandler())
	}
	// Last, as kube-proxy: it lists the other pages, not itself.
	if cfg.Statusz != nil {
		st := *cfg.Statusz
		st.Paths = paths
		mux.Handle("/statusz", debugz.StatuszHandler(cfg.Component, st))
	}
	return listen("metrics", cfg.Address, mux, !cfg.Profiling)
}

// Addr is the address actually bound (useful with port 0).
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// Serve serves until ctx is done, then shuts down gracefully, letting
// in-flight requests finish. It returns nil after a shutdown caused by ctx.
func (s *Server) Serve(ctx context.Context) error {
	logger := klog.FromContext(ctx).WithValues("server", s.name, "address", s.Addr().String())
	errCh := make(chan error, 1)
	go func() { errCh <- s.srv.Serve(s.listener) }()
	logger.V(2).Info("Serving")

	select {
	case err := <-errCh:
		return fmt.Errorf("%s server on %s: %w", s.name, s.Addr(), err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), shutdownGrace)
	defer cancel()
	if err := s.srv.Shutdown(shutdownCtx); err != nil {
		_ = s.srv.Close()
		return fmt.Errorf("shutting down %s server on %s: %w", s.name, s.Addr(), err)
	}
	if err := <-errCh; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s server on %s: %w", s.name, s.Addr(), err)
	}
	logger.V(2).Info("Stopped")
	return nil
}

// Close releases the listener of a server that will not be served.
func (s *Server) Close() error {
	if err := s.listener.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("closing %s server on %s: %w", s.name, s.Addr(), err)
	}
	return nil
}
