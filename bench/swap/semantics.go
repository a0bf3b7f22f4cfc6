package swap

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// Cross-node semantics, asserted on every node with whichever proxy runs.

// tries is how many requests a check sends where the endpoint is chosen at
// random: with a third of the endpoints local, 30 tries all staying local
// has a chance of 2e-15.
const tries = 30

// dropWait is how long a connection that should go unanswered is given.
const dropWait = time.Second

// answer is a /client-address answer: the pod and the source it saw.
type answer struct{ pod, source string }

func askClientAddress(d lab.Dialer, url string) (answer, error) {
	status, body, err := lab.HTTPGetStatus(d, url)
	if err != nil {
		return answer{}, err
	}
	pod, source, ok := strings.Cut(body, " ")
	if status != 200 || !ok {
		return answer{}, fmt.Errorf("GET %s: %d %q, want 200 \"<pod> <client address>\"", url, status, body)
	}
	return answer{pod, source}, nil
}

// outcome classifies a connection attempt that should fail: how a client
// sees the node's refusal.
func outcome(err error) string {
	var ne net.Error
	switch {
	case err == nil:
		return "answered"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused"
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "no answer"
	default:
		return "error: " + err.Error()
	}
}

// observed is what one proxy showed, to compare with the other's.
type observed struct {
	// noLocal is how a node without a local endpoint treats a Local
	// NodePort ("no answer", "refused").
	noLocal string
	// health is each node's health-check answer.
	health map[string]healthAnswer
}

// healthAnswer is a health-check node port's answer.
type healthAnswer struct {
	status int
	body   string
	// fields is the body decoded; weight the X-Load-Balancing-Endpoint-Weight
	// header kube-proxy sets.
	fields map[string]any
	weight string
}

// checkHealth asks a health-check node port as the load balancer and checks
// its status and its count of local endpoints.
func checkHealth(t *testing.T, c *lab.Cluster, url string, status, local int) healthAnswer {
	t.Helper()
	client := &http.Client{Timeout: 3 * time.Second,
		Transport: &http.Transport{DialContext: c.LB.DialContext, DisableKeepAlives: true}}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	a := healthAnswer{status: resp.StatusCode, body: string(data), weight: resp.Header.Get("X-Load-Balancing-Endpoint-Weight")}
	if err := json.Unmarshal(data, &a.fields); err != nil {
		t.Fatalf("GET %s: %d, body %q is not JSON: %v", url, a.status, data, err)
	}
	if a.status != status || a.fields["localEndpoints"] != float64(local) || a.fields["serviceProxyHealthy"] != true {
		t.Fatalf("GET %s: %d %q, want %d with %d local endpoints, proxy healthy", url, a.status, data, status, local)
	}
	return a
}

// checkSemantics asserts, on every node, what kube-proxy does there, and
// returns what it saw, to compare the two proxies.
func checkSemantics(t *testing.T, c *lab.Cluster, proxy string) observed {
	t.Helper()
	seen := observed{health: map[string]healthAnswer{}}
	for i, n := range c.Nodes {
		web := fmt.Sprintf("http://%s:%d%s", n.IPv4, webNodePort, lab.ClientAddressURLPath)
		t.Run(proxy+"/"+n.Name, func(t *testing.T) {
			t.Run("NodePort, Cluster policy: masqueraded to the node's address on the way to a remote pod", func(t *testing.T) {
				remote := 0
				for range tries {
					a, err := askClientAddress(c.Client, web)
					if err != nil {
						t.Fatal(err)
					}
					pod := c.PodNamed(a.pod)
					if pod == nil {
						t.Fatalf("answer from %q, not a pod", a.pod)
					}
					want := n.IPv4.String() // leaving by the node network
					if c.NodeOf(pod) == n {
						want = n.Gateway.String() // leaving by the bridge
					} else {
						remote++
					}
					if a.source != want {
						t.Fatalf("%s saw the request from %s, want %s (masqueraded by %s)", a.pod, a.source, want, n.Name)
					}
				}
				if remote == 0 {
					t.Fatalf("%d requests all reached %s's own pod; want some to reach the other nodes' pods", tries, n.Name)
				}
			})
			t.Run("ClusterIP from a pod: the pod's address kept", func(t *testing.T) {
				from := n.Pod("client")
				url := fmt.Sprintf("http://%s:%d%s", webVIP, servicePort, lab.ClientAddressURLPath)
				remote := 0
				for range tries {
					a, err := askClientAddress(from, url)
					if err != nil {
						t.Fatal(err)
					}
					if a.source != from.IPv4.String() {
						t.Fatalf("%s saw %s's request from %s, want its own address", a.pod, from.Name, a.source)
					}
					if pod := c.PodNamed(a.pod); pod != nil && c.NodeOf(pod) != n {
						remote++
					}
				}
				if remote == 0 {
					t.Fatalf("%d requests all stayed on %s; want some on the other nodes", tries, n.Name)
				}
			})
			local := fmt.Sprintf("http://%s:%d%s", n.IPv4, localNodePort, lab.ClientAddressURLPath)
			hc := fmt.Sprintf("http://%s:%d/", n.IPv4, localHCPort)
			if hasLocal(c, i) {
				t.Run("NodePort, Local policy: the node's own pod, the client's address kept", func(t *testing.T) {
					want := answer{n.Pod("web").Name, c.Client.IPv4.String()}
					for range tries / 3 {
						a, err := askClientAddress(c.Client, local)
						if err != nil || a != want {
							t.Fatalf("got %+v (%v), want %+v", a, err, want)
						}
					}
				})
				t.Run("health-check node port: 200", func(t *testing.T) {
					seen.health[n.Name] = checkHealth(t, c, hc, 200, 1)
				})
				return
			}
			t.Run("NodePort, Local policy: no answer without a local pod", func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), dropWait)
				defer cancel()
				conn, err := c.Client.DialContext(ctx, "tcp", fmt.Sprintf("%s:%d", n.IPv4, localNodePort))
				if err == nil {
					conn.Close()
				}
				seen.noLocal = outcome(err)
				if seen.noLocal == "answered" {
					t.Fatalf("%s accepted a connection to the Local NodePort without a local endpoint", n.Name)
				}
			})
			t.Run("health-check node port: 503", func(t *testing.T) {
				seen.health[n.Name] = checkHealth(t, c, hc, 503, 0)
			})
		})
	}
	return seen
}
