package e2e

import (
	"testing"

	"kproxy.dev/kproxy/bench/lab"
)

const multiVIP = "198.18.0.50"

func TestMultiPortNamedTargetPorts(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, func(backends []string) string {
			// The service ports target named container ports; the slice lists
			// its ports under the service ports' names, in the other order,
			// so endpoints matched by position instead of name would cross.
			svc := serviceDoc("multi", "clusterIP: "+multiVIP+", ports: ["+
				"{name: web, port: 80, targetPort: http-web}, "+
				"{name: upload, port: 7002, targetPort: digest-port}]", "")
			slice := sliceDoc("multi-1", "multi",
				"{name: upload, port: 9002, protocol: TCP}, {name: web, port: 8080, protocol: TCP}",
				remoteEndpoints(backends, "")...)
			return docs(nodeDoc, svc, slice)
		})
		if l == nil {
			return
		}
		for _, from := range []*lab.Host{l.topo.Client, l.topo.Node} {
			l.wantBalanced(t, "port web (nginx) from "+from.Name, askHTTP(from, "http://"+multiVIP+"/"))
			l.wantBalanced(t, "port upload (TCP digest server) from "+from.Name, func() (string, error) {
				return digest(from, multiVIP+":7002", "upload through the second port of "+multiVIP)
			})
		}
	})
}

const (
	termAllVIP   = "198.18.0.60"
	termMixedVIP = "198.18.0.61"
	termGoneVIP  = "198.18.0.62"
)

func TestTerminatingEndpoints(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, func(backends []string) string {
			return docs(nodeDoc,
				httpService("term-all", termAllVIP, ""), httpService("term-mixed", termMixedVIP, ""),
				httpService("term-gone", termGoneVIP, ""),
				httpSlice("term-all", remoteEndpoints(backends, terminatingCond)...),
				httpSlice("term-mixed",
					endpoint(backends[0], "other", terminatingCond),
					endpoint(backends[1], "other", readyCond),
					endpoint(backends[2], "other", terminatingCond)),
				httpSlice("term-gone", remoteEndpoints(backends, goneCond)...))
		})
		if l == nil {
			return
		}
		client := l.topo.Client
		t.Run("only serving-terminating endpoints still serve", func(t *testing.T) {
			l.wantBalanced(t, "serving-terminating endpoints", askHTTP(client, "http://"+termAllVIP+"/"))
		})
		t.Run("a ready endpoint is preferred to terminating ones", func(t *testing.T) {
			seen := lab.Spread(t, 9, askHTTP(client, "http://"+termMixedVIP+"/"))
			wantOnly(t, "one ready endpoint among terminating ones", seen, "backend-2")
		})
		t.Run("terminating endpoints that stopped serving are not used", func(t *testing.T) {
			answer, err := askHTTP(client, "http://"+termGoneVIP+"/")()
			wantRefused(t, "a service whose endpoints all stopped serving", answer, err)
		})
	})
}

const (
	localVIP     = "198.18.0.70"
	localNoneVIP = "198.18.0.71"
)

func TestInternalTrafficPolicyLocal(t *testing.T) {
	forEachMode(t, func(t *testing.T, m proxyMode) {
		l := startLab(t, m, func(backends []string) string {
			return docs(nodeDoc,
				httpService("local", localVIP, "internalTrafficPolicy: Local"),
				httpService("local-none", localNoneVIP, "internalTrafficPolicy: Local"),
				// kproxy runs as node "node": backend-2 is its local endpoint.
				httpSlice("local",
					endpoint(backends[0], "other", ""),
					endpoint(backends[1], "node", ""),
					endpoint(backends[2], "other", "")),
				httpSlice("local-none", remoteEndpoints(backends, "")...))
		})
		if l == nil {
			return
		}
		for _, from := range []*lab.Host{l.topo.Client, l.topo.Node} {
			seen := lab.Spread(t, 9, askHTTP(from, "http://"+localVIP+"/"))
			wantOnly(t, "internalTrafficPolicy=Local from "+from.Name, seen, "backend-2")
			what := "internalTrafficPolicy=Local without local endpoints from " + from.Name
			if m.localPortals {
				wantDropped(t, from, what, localNoneVIP+":80")
				continue
			}
			wantNotServed(t, from, what, localNoneVIP+":80")
		}
	})
}
