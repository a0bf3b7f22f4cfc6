// Package servicehealth serves the health-check node ports of
// externalTrafficPolicy=Local LoadBalancer services, the way kube-proxy
// does: cloud load balancers probe each node's port and send traffic only to
// nodes that answer 200, which a node does while it has ready local
// endpoints for the service and its proxy is healthy.
package servicehealth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/serve/httplimit"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Config configures a Server.
type Config struct {
	// Addresses returns the addresses to listen on (--nodeport-addresses
	// resolved against this node's Node object, which "primary" needs);
	// empty means every address. It is asked at every Sync, and the
	// listeners move when its answer changes. nil means every address.
	Addresses func(node *servicemap.NodeInfo) []netip.Addr
	// ProxyHealthy reports whether the proxy itself is healthy (in sync and
	// the node not being deleted); nil means always.
	ProxyHealthy func() bool
	// OpenFailed, when set, hears of each health-check node port that could
	// not be opened (kproxy records kube-proxy's event on the Service).
	OpenFailed func(svc types.NamespacedName, port uint16, err error)
	// Listen opens a listener; nil means net.Listen. Tests inject failures.
	Listen func(network, address string) (net.Listener, error)
	Logger klog.Logger
}

// Server runs one HTTP listener set per health-check node port.
type Server struct {
	cfg Config

	mu       sync.Mutex
	services map[types.NamespacedName]*service
	// addrs is what Addresses answered at the last Sync: the listeners'.
	addrs []netip.Addr
}

// service is one health-checked service and its listeners.
type service struct {
	name      types.NamespacedName
	port      uint16
	servers   []*http.Server
	mu        sync.Mutex
	endpoints int // ready endpoints on this node
}

// New returns a Server with nothing to serve yet.
func New(cfg Config) *Server {
	if cfg.Listen == nil {
		cfg.Listen = net.Listen
	}
	if cfg.Addresses == nil {
		cfg.Addresses = func(*servicemap.NodeInfo) []netip.Addr { return nil }
	}
	if cfg.ProxyHealthy == nil {
		cfg.ProxyHealthy = func() bool { return true }
	}
	return &Server{cfg: cfg, services: map[types.NamespacedName]*service{}}
}

// wanted is, per service with a health-check node port, the port and its
// ready local endpoints (over all the service's ports, each endpoint once).
type wanted struct {
	port      uint16
	endpoints map[netip.AddrPort]bool
}

// Sync opens listeners for new health-check node ports, closes the ones no
// longer wanted and updates the local endpoint counts. A port that cannot be
// opened is reported in the returned error; the others are served anyway.
func (s *Server) Sync(snap *servicemap.Snapshot) error {
	want := map[types.NamespacedName]*wanted{}
	for _, sp := range snap.All() {
		if sp.HealthCheckNodePort == 0 {
			continue
		}
		w, ok := want[sp.Name.NamespacedName]
		if !ok {
			w = &wanted{port: sp.HealthCheckNodePort, endpoints: map[netip.AddrPort]bool{}}
			want[sp.Name.NamespacedName] = w
		}
		for _, ep := range sp.Endpoints {
			if ep.IsLocal && ep.Ready {
				w.endpoints[netip.AddrPortFrom(ep.Addr, 0)] = true
			}
		}
	}

	addrs := s.cfg.Addresses(snap.Node)

	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	// New addresses (the Node object arrived, or its primary IP changed)
	// reopen every port on them.
	moved := !slices.Equal(addrs, s.addrs)
	if moved && len(s.services) > 0 {
		s.cfg.Logger.Info("Health-check node ports move to new node addresses", "addresses", addrs, "previous", s.addrs)
	}
	s.addrs = addrs
	for name, svc := range s.services {
		if w, ok := want[name]; !ok || w.port != svc.port || moved {
			svc.close()
			delete(s.services, name)
		}
	}
	for name, w := range want {
		svc, ok := s.services[name]
		if !ok {
			var err error
			if svc, err = s.open(name, w.port); err != nil {
				if s.cfg.OpenFailed != nil {
					// The listener's own error, as kube-proxy reports it.
					cause := errors.Unwrap(err)
					if cause == nil {
						cause = err
					}
					s.cfg.OpenFailed(name, w.port, cause)
				}
				errs = append(errs, err)
				continue
			}
			s.services[name] = svc
		}
		svc.mu.Lock()
		svc.endpoints = len(w.endpoints)
		svc.mu.Unlock()
	}
	return errors.Join(errs...)
}

// open starts serving name's health check on port at every address.
func (s *Server) open(name types.NamespacedName, port uint16) (*service, error) {
	svc := &service{name: name, port: port}
	// One listener on every address, or one per address given; an
	// unspecified one (0.0.0.0, ::) stands for its family only, so the
	// IPv6 wildcard does not take the IPv4 port too.
	type bind struct{ network, addr string }
	binds := []bind{{"tcp", net.JoinHostPort("", strconv.Itoa(int(port)))}}
	if len(s.addrs) > 0 {
		binds = binds[:0]
		for _, a := range s.addrs {
			network := "tcp4"
			if a.Is6() {
				network = "tcp6"
			}
			binds = append(binds, bind{network, netip.AddrPortFrom(a, port).String()})
		}
	}
	var addrs []string
	for _, b := range binds {
		addr := b.addr
		addrs = append(addrs, addr)
		ln, err := s.cfg.Listen(b.network, addr)
		if err != nil {
			svc.close()
			return nil, fmt.Errorf("health-check node port %d of service %s on %s: %w", port, name, addr, err)
		}
		// Load balancers probe from outside: no host may hold the port's
		// connections or keep a probe out (httplimit).
		limited := httplimit.Limit(ln, 0, 0)
		srv := &http.Server{Handler: s.handler(svc)}
		limited.Harden(srv, true)
		svc.servers = append(svc.servers, srv)
		go func() {
			if err := srv.Serve(limited); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.cfg.Logger.Error(err, "Health-check node port stopped serving", "service", name, "address", addr)
			}
		}()
	}
	s.cfg.Logger.V(2).Info("Serving a health-check node port", "service", name, "port", port, "addresses", addrs)
	return svc, nil
}

func (svc *service) close() {
	for _, srv := range svc.servers {
		_ = srv.Shutdown(context.Background())
	}
}

// response is kube-proxy's health-check body.
type response struct {
	Service struct {
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"service"`
	LocalEndpoints      int  `json:"localEndpoints"`
	ServiceProxyHealthy bool `json:"serviceProxyHealthy"`
}

func (s *Server) handler(svc *service) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var resp response
		resp.Service.Namespace, resp.Service.Name = svc.name.Namespace, svc.name.Name
		svc.mu.Lock()
		resp.LocalEndpoints = svc.endpoints
		svc.mu.Unlock()
		resp.ServiceProxyHealthy = s.cfg.ProxyHealthy()
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		// Load balancers that weigh nodes by local endpoints read this
		// header (kube-proxy sets it).
		w.Header().Set("X-Load-Balancing-Endpoint-Weight", strconv.Itoa(resp.LocalEndpoints))
		if resp.LocalEndpoints > 0 && resp.ServiceProxyHealthy {
			w.WriteHeader(http.StatusOK)
		} else {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		// Indented with tabs and without a final newline, byte for byte
		// kube-proxy's body.
		body, _ := json.MarshalIndent(resp, "", "\t")
		_, _ = w.Write(body)
	})
}

// Ports lists the health-check node ports being served, sorted.
func (s *Server) Ports() []uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []uint16
	for _, svc := range s.services {
		out = append(out, svc.port)
	}
	slices.Sort(out)
	return out
}

// Close stops every listener.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, svc := range s.services {
		svc.close()
		delete(s.services, name)
	}
	return nil
}
