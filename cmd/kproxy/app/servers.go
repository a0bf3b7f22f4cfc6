package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"time"

	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/serve/healthz"
)

// bindRetry is how often kube-proxy retries binding its healthz and metrics
// ports when the first try failed and --bind-address-hard-fail is off.
const bindRetry = 5 * time.Second

// namedServer is the healthz or the metrics server: bound at start, or, when
// its port could not be bound and failing is not asked for, bound later.
type namedServer struct {
	what   string
	server *healthz.Server                 // nil until bound
	open   func() (*healthz.Server, error) // binds it
	logger klog.Logger
	retry  time.Duration
}

// serve serves a bound server; an unbound one is retried until it binds,
// then served.
func (n namedServer) serve(ctx context.Context) error {
	if n.server != nil {
		return n.server.Serve(ctx)
	}
	t := time.NewTicker(n.retry)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		s, err := n.open()
		if err != nil {
			n.logger.Error(err, "Still cannot bind; retrying", "server", n.what, "in", n.retry)
			continue
		}
		n.logger.Info("Bound at last", "server", n.what, "address", s.Addr().String())
		return s.Serve(ctx)
	}
}

type serverSet struct {
	logger   klog.Logger
	hardFail bool
	// retry is bindRetry; tests shorten it.
	retry time.Duration
	list  []namedServer
}

// add binds a server with open. A failure fails the start with
// --bind-address-hard-fail (flag names the setting); without it, it is
// logged and the server is bound later (kube-proxy's default).
func (s *serverSet) add(what, flag, addr string, open func() (*healthz.Server, error)) error {
	srv, err := open()
	if err != nil {
		if s.hardFail {
			s.close()
			return &bindError{server: what, flag: flag, addr: addr, err: err}
		}
		retry := s.retry
		if retry <= 0 {
			retry = bindRetry
		}
		s.logger.Error(err, "Cannot bind; carrying on without it and retrying (--bind-address-hard-fail makes this fatal)",
			"server", what, "address", addr, "in", retry)
		s.list = append(s.list, namedServer{what: what + " on " + addr, open: open, logger: s.logger, retry: retry})
		return nil
	}
	s.list = append(s.list, namedServer{what: what + " on " + srv.Addr().String(), server: srv, logger: s.logger})
	return nil
}

// close releases the ports bound so far, of servers that will not be served.
func (s *serverSet) close() {
	for _, n := range s.list {
		if n.server != nil {
			_ = n.server.Close()
		}
	}
}

// bindError is a server that could not bind with --bind-address-hard-fail.
type bindError struct {
	server, flag, addr string // server is "healthz" or "metrics"
	err                error
}

func (e *bindError) Error() string { return e.flag + ": " + e.err.Error() }
func (e *bindError) Unwrap() error { return e.err }

// kubeProxyEvent returns the reason and note of the event kube-proxy v1.36
// records on its Node for this failure: its healthz server's error, or its
// metrics server's listen error, as kube-proxy words them (around the
// listen error itself, which kproxy wraps in other words).
func (e *bindError) kubeProxyEvent() (reason, note string) {
	listenErr := e.err.Error()
	var op *net.OpError
	if errors.As(e.err, &op) {
		listenErr = op.Error()
	}
	if e.server == "healthz" {
		return "FailedToStartProxierHealthcheck", fmt.Sprintf("healthz server failed: failed to start proxy healthz on %s: %s", e.addr, listenErr)
	}
	return "FailedToStartMetricServer", listenErr
}
