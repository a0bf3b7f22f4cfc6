package swap

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"kproxy.dev/kproxy/bench/lab"
)

// steady is how long traffic runs with one proxy everywhere before and
// after the swaps.
const steady = 3 * time.Second

// kubeletPause is how long the node is without a proxy when a change is
// made meanwhile: about what a kubelet takes to start the next pod.
const kubeletPause = time.Second

// controlPhase removes a node's rules for controlGap between two proxies.
const (
	controlPhase = "control: a gap"
	controlGap   = 500 * time.Millisecond
)

// TestLiveSwap runs kube-proxy v1.36.3 (iptables mode) on every node of a
// three-node lab cluster, starts continuous traffic (ClusterIP from a pod on
// each node, NodePort from an outside client to every node, a cloud load
// balancer health-checking a Local service's health-check node port on
// every node and sending the client's requests to the nodes that pass),
// then replaces kube-proxy by kproxy node by node and back again, and
// counts every request. The order on a node is a DaemonSet rolling
// update's (maxUnavailable 1, no surge): the old pod is terminated
// (SIGTERM, no --cleanup, so its rules stay in the kernel), then the new
// one starts and must take the rules over without a gap; the rollout moves
// to the next node once the new proxy is ready. Requests must not fail in
// any phase. Cross-node semantics are asserted on every node with each
// proxy.
func TestLiveSwap(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver, etcd, kube-proxy and kproxy on a three-node lab")
	}
	lab.RequireRoot(t)
	kproxyBin := lab.KproxyBinary(t)
	if lab.InFreshNetns(t, lab.KproxyBinaryEnv+"="+kproxyBin) {
		return
	}
	kubeProxyBin := lab.KubeProxyBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	c := lab.NewCluster(t, lab.ClusterOptions{Nodes: 3, Pods: []string{"web", "client"}})
	api := lab.StartAPIServer(t)
	c.ServeAPI(t, api)
	c.RegisterNodes(t, api.Client)
	dataDir := t.TempDir()
	for _, n := range c.Nodes {
		if err := lab.StartNginx(t, n.Pod("web"), dataDir).WaitListening("tcp", lab.NginxPort, 10*time.Second); err != nil {
			t.Fatal(err)
		}
	}
	createServices(ctx, t, api.Client, c)

	p := &proxies{t: t, kubeconfig: api.KubeconfigPath, kubeProxyBin: kubeProxyBin, kproxyBin: kproxyBin}
	for _, n := range c.Nodes {
		p.on = append(p.on, &proxyOn{node: n})
	}
	for i := range c.Nodes {
		p.start(i, kubeProxy)
	}
	for i := range c.Nodes {
		p.waitReady(c, i)
	}

	r := newRecorder("kube-proxy")
	lb := &loadBalancer{healthy: make([]bool, len(c.Nodes))}
	for i := range c.Nodes {
		lb.setHealthy(i, hasLocal(c, i))
	}
	stop := startTraffic(c, r, lb)
	stopped := false
	defer func() {
		if !stopped {
			stop()
			t.Logf("requests until the test stopped:\n%s\nevents:\n%s", r.table(), strings.Join(r.events, "\n"))
		}
	}()

	time.Sleep(steady)
	seen := map[string]observed{}
	seen[kubeProxy] = checkSemantics(t, c, kubeProxy)
	rules := map[string][]string{kubeProxy: saveRules(t, c)}

	// rollout replaces the proxy on every node, one at a time. On the
	// second node, web's pod on the last node starts terminating while no
	// proxy runs there, and the pause between the pods is a kubelet's
	// (about a second): the new proxy's first sync must apply a change
	// the rules it takes over do not have.
	changeOn, gone := 1, c.Nodes[len(c.Nodes)-1].Pod("web")
	rollout := func(phase, to string) {
		r.setPhase(phase)
		for i, on := range p.on {
			from := on.name
			p.stop(i)
			r.event("%s: %s stopped (SIGTERM, rules left in place)", on.node.Name, from)
			left, err := on.node.Exec("iptables-save", "-t", "nat")
			if err != nil || !strings.Contains(left, webVIP+"/32") {
				t.Errorf("%s's rules for web are gone once it stopped on %s (%v):\n%s", from, on.node.Name, err, left)
			}
			if i == changeOn {
				if err := setTerminating(ctx, api.Client, gone, true); err != nil {
					t.Fatal(err)
				}
				r.event("%s: %s terminating while no proxy runs there", on.node.Name, gone.Name)
				time.Sleep(kubeletPause)
			}
			p.start(i, to)
			took := p.waitReady(c, i)
			r.event("%s: %s ready %v after its start", on.node.Name, to, took.Round(time.Millisecond))
			if i == changeOn {
				t.Run(to+" applies a change made before it started", func(t *testing.T) {
					wantAvoided(t, c, on.node, gone)
				})
				if err := setTerminating(ctx, api.Client, gone, false); err != nil {
					t.Fatal(err)
				}
				r.event("%s ready again", gone.Name)
			}
			// As an operator sets minReadySeconds for a proxy behind load
			// balancers: the next node goes only once this one is back in
			// the pool, or both could be out at once.
			if hasLocal(c, i) {
				lab.Within(t, 10*time.Second, on.node.Name+" back in the load balancer's pool", func() (bool, string) {
					return slices.Contains(lb.pool(), i), fmt.Sprint("pool: ", lb.pool())
				})
			}
		}
	}
	rollout("swap to kproxy", kproxy)
	r.setPhase("kproxy")
	waitReached(t, c, gone)
	time.Sleep(steady)
	seen[kproxy] = checkSemantics(t, c, kproxy)
	rules[kproxy] = saveRules(t, c)
	rollout("swap to kube-proxy", kubeProxy)
	r.setPhase("kube-proxy again")
	waitReached(t, c, gone)
	time.Sleep(steady)
	rules["again"] = saveRules(t, c)
	for i, n := range c.Nodes {
		// The round trip leaves every node as kube-proxy had it.
		if diff := lineDiff(rules[kubeProxy][i], rules["again"][i]); diff != "" {
			t.Errorf("%s: kube-proxy's rules after the round trip through kproxy differ from before (-before +after):\n%s", n.Name, diff)
		}
		// kproxy writes kube-proxy's rules, nfacct counters included.
		if diff := lineDiff(rules[kubeProxy][i], rules[kproxy][i]); diff != "" {
			t.Errorf("%s: kproxy's rules differ from kube-proxy's (-kube-proxy +kproxy):\n%s", n.Name, diff)
		}
	}
	// The control: the same swap with the rules removed in between
	// (--cleanup, as a rollback that cleans up would do) must cost
	// requests, or the traffic could not have seen a gap.
	r.setPhase(controlPhase)
	p.stop(0)
	if out, err := c.Nodes[0].Exec(kubeProxyBin, "--cleanup"); err != nil {
		t.Fatalf("kube-proxy --cleanup on %s: %v\n%s", c.Nodes[0].Name, err, out)
	}
	r.event("%s: rules removed (kube-proxy --cleanup)", c.Nodes[0].Name)
	time.Sleep(controlGap)
	p.start(0, kubeProxy)
	p.waitReady(c, 0)
	r.event("%s: kube-proxy ready again", c.Nodes[0].Name)
	time.Sleep(steady / 3)
	stop()
	stopped = true

	compare(t, seen[kubeProxy], seen[kproxy])
	t.Logf("requests by phase and stream (slow: over %v; the health checks are the load balancer's, every %v):\n%s",
		slowRequest, healthInterval, r.table())
	t.Logf("events:\n%s", strings.Join(r.events, "\n"))
	isData := func(s string) bool { return !isHealthCheck(s) }
	for _, phase := range r.phases {
		data, hc := r.totals(phase, isData), r.totals(phase, isHealthCheck)
		t.Logf("%-22s requests %6d failed %d (slow %d, slowest %v); health checks %4d failed %d",
			phase, data.ok+data.failed, data.failed, data.slow, data.max.Round(time.Millisecond), hc.ok+hc.failed, hc.failed)
		if phase == controlPhase {
			if data.failed == 0 {
				t.Errorf("%s: no request failed while %s had no rules for %v: the traffic cannot see a gap", phase, c.Nodes[0].Name, controlGap)
			}
			continue
		}
		if data.ok == 0 {
			t.Errorf("%s: no request answered", phase)
		}
		if data.failed > 0 {
			t.Errorf("%s: %d of %d requests failed; first ones:\n%s", phase, data.failed, data.ok+data.failed, strings.Join(data.failures, "\n"))
		}
	}
}

// compare fails on anything a client or load balancer would see differ
// between the proxies, down to the health-check body's bytes.
func compare(t *testing.T, ref, got observed) {
	t.Helper()
	if got.noLocal != ref.noLocal {
		t.Errorf("a Local NodePort on a node without a local endpoint: kube-proxy %s, kproxy %s", ref.noLocal, got.noLocal)
	}
	for node, want := range ref.health {
		have := got.health[node]
		if have.status != want.status || !reflect.DeepEqual(have.fields, want.fields) {
			t.Errorf("health-check node port on %s: kube-proxy %d %v, kproxy %d %v", node, want.status, want.fields, have.status, have.fields)
		}
		if have.body != want.body {
			t.Errorf("health-check body on %s: kube-proxy %q, kproxy %q", node, want.body, have.body)
		}
		if have.weight != want.weight {
			t.Errorf("X-Load-Balancing-Endpoint-Weight on %s: kube-proxy %q, kproxy %q", node, want.weight, have.weight)
		}
	}
}

// saveRules returns every node's iptables-save output without comments and
// counters.
func saveRules(t *testing.T, c *lab.Cluster) []string {
	t.Helper()
	var out []string
	for _, n := range c.Nodes {
		save, err := n.Exec("iptables-save")
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, line := range strings.Split(lab.WithoutComments(save), "\n") {
			if strings.HasPrefix(line, ":") {
				line = strings.Fields(line)[0] + " " + strings.Fields(line)[1]
			}
			kept = append(kept, line)
		}
		out = append(out, strings.Join(kept, "\n"))
	}
	return out
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b string) string {
	count := map[string]int{}
	for _, l := range strings.Split(a, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(b, "\n") {
		count[l]--
	}
	var out []string
	for l, n := range count {
		switch {
		case n > 0:
			out = append(out, fmt.Sprintf("- %s (x%d)", l, n))
		case n < 0:
			out = append(out, fmt.Sprintf("+ %s (x%d)", l, -n))
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// wantAvoided checks that neither the node's pods nor the outside client
// through the node reach the terminating pod gone any more.
func wantAvoided(t *testing.T, c *lab.Cluster, n *lab.ClusterNode, gone *lab.Host) {
	t.Helper()
	for _, ask := range []struct {
		from *lab.Host
		url  string
	}{
		{n.Pod("client"), fmt.Sprintf("http://%s:%d/", webVIP, servicePort)},
		{c.Client, fmt.Sprintf("http://%s:%d/", n.IPv4, webNodePort)},
	} {
		for range tries {
			pod, err := lab.HTTPGet(ask.from, ask.url)
			if err != nil {
				t.Fatalf("%s from %s: %v", ask.url, ask.from.Name, err)
			}
			if pod == gone.Name {
				t.Fatalf("%s from %s reached %s, whose endpoint is terminating", ask.url, ask.from.Name, gone.Name)
			}
		}
	}
}

// waitReached waits until every node's proxy sends NodePort traffic to pod
// again.
func waitReached(t *testing.T, c *lab.Cluster, pod *lab.Host) {
	t.Helper()
	for _, n := range c.Nodes {
		url := fmt.Sprintf("http://%s:%d/", n.IPv4, webNodePort)
		lab.Eventually(t, pod.Name+" reached through "+n.Name, func() (bool, string) {
			seen := map[string]int{}
			for range tries {
				got, err := lab.HTTPGet(c.Client, url)
				if err != nil {
					return false, err.Error()
				}
				seen[got]++
			}
			return seen[pod.Name] > 0, fmt.Sprint(seen)
		})
	}
}
