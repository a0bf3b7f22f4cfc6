package e2e

import (
	"fmt"
	"testing"
)

// The core services file, shared by the ClusterIP, refusal, NodePort and
// change cases.

const (
	webVIP      = "198.18.0.10"
	echoVIP     = "198.18.0.53"
	emptyVIP    = "198.18.0.99"
	stickyVIP   = "198.18.0.20"
	digestVIP   = "198.18.0.30"
	goneVIP     = "198.18.0.95"
	externalIP  = "198.18.5.10"
	webNodePort = 30080
)

// coreServices describes one version of the core services file.
type coreServices struct {
	// backends are every backend's addresses; webBackends and
	// stickyBackends, when not nil, replace them as web's and sticky's
	// endpoints.
	backends, webBackends, stickyBackends []string
	// stickyTimeout is sticky's ClientIP affinity timeout in seconds.
	stickyTimeout int
	// withoutGone leaves the service "gone" out.
	withoutGone bool
}

// render makes the services file: web (TCP, named target port, NodePort, an
// external IP), echo (UDP), empty (TCP and UDP, no endpoints), sticky
// (ClientIP affinity), digest (TCP, for half-close and integrity) and gone
// (to be deleted).
func (c coreServices) render() string {
	webBackends := c.backends
	if c.webBackends != nil {
		webBackends = c.webBackends
	}
	all := remoteEndpoints(c.backends, "")
	sticky := all
	if c.stickyBackends != nil {
		sticky = remoteEndpoints(c.stickyBackends, "")
	}
	parts := []string{nodeDoc,
		serviceDoc("web", fmt.Sprintf("type: NodePort, clusterIP: %s, externalIPs: [%s], "+
			"ports: [{name: http, port: 80, targetPort: http-web, nodePort: %d}]", webVIP, externalIP, webNodePort), ""),
		httpSlice("web", remoteEndpoints(webBackends, "")...),
		serviceDoc("echo", "clusterIP: "+echoVIP+", ports: [{name: dns, port: 53, protocol: UDP, targetPort: 9000}]", ""),
		sliceDoc("echo-1", "echo", "{name: dns, port: 9000, protocol: UDP}", all...),
		serviceDoc("empty", "clusterIP: "+emptyVIP+", ports: [{name: http, port: 80}, {name: dns, port: 53, protocol: UDP}]", ""),
		httpService("sticky", stickyVIP, fmt.Sprintf("sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: %d}}", c.stickyTimeout)),
		httpSlice("sticky", sticky...),
		serviceDoc("digest", "clusterIP: "+digestVIP+", ports: [{name: digest, port: 9002}]", ""),
		sliceDoc("digest-1", "digest", "{name: digest, port: 9002, protocol: TCP}", all...),
	}
	if !c.withoutGone {
		parts = append(parts, httpService("gone", goneVIP, ""), httpSlice("gone", all...))
	}
	return docs(parts...)
}

// renderCore renders the core services file with a one-minute affinity
// timeout.
func renderCore(backends []string) string {
	return coreServices{backends: backends, stickyTimeout: 60}.render()
}

// startCoreLab starts the lab on the core services file (renderCore), running
// kproxy with extraArgs added.
func startCoreLab(t *testing.T, m proxyMode, extraArgs ...string) *e2eLab {
	t.Helper()
	return startLab(t, m, renderCore, extraArgs...)
}
