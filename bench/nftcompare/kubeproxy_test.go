package nftcompare

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kproxy.dev/kproxy/bench/lab"
)

// Environment the test reads (the namespace child inherits it).
const (
	// ReportEnv names a file the test writes its markdown report to.
	ReportEnv = "KPROXY_NFTCOMPARE_REPORT"
	// OnlyEnv is a regexp: only scenarios whose name matches run.
	OnlyEnv = "KPROXY_NFTCOMPARE_ONLY"
	// DumpEnv names a directory the test writes every normalised table to,
	// as <scenario>[-then]-<run>-<family>.nft.
	DumpEnv = "KPROXY_NFTCOMPARE_DUMP"
)

// knownDifferences are the intended differences between kube-proxy's tables
// and kproxy's, each with its reason. The test fails on any other. There are
// none.
func knownDifferences() []KnownDifference { return nil }

// unallocatedClusterIPs ends kube-proxy's rule that drops traffic to
// addresses of the service ranges no Service holds.
const unallocatedClusterIPs = `drop comment "Drop traffic to unallocated ClusterIPs"`

// manyServices is the size of the generated scenario.
const manyServices = 200

// families are the nftables families both proxies write a kube-proxy table in.
func families() []string { return []string{"ip", "ip6"} }

// TestSameNFTablesAsKubeProxy runs, for each scenario of testdata, the real
// kube-proxy v1.36.3 twice and kproxy once, each in a namespace of its own
// with --proxy-mode=nftables and the same flags, against one lab API server
// holding the scenario's objects, and compares their `nft list table`
// output (ip and ip6) after normalisation: the two kube-proxy runs must be
// identical (else the normaliser misses something run-dependent), and
// kproxy's must be identical to kube-proxy's but for knownDifferences.
func TestSameNFTablesAsKubeProxy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver, etcd, kube-proxy and kproxy")
	}
	lab.RequireRoot(t)
	kproxyBin := lab.KproxyBinary(t)
	if lab.InFreshNetns(t, lab.KproxyBinaryEnv+"="+kproxyBin) {
		return
	}
	kubeProxyBin := lab.KubeProxyBinary(t)
	if err := SweepStaleNetns(); err != nil {
		t.Fatal(err)
	}
	scenarios, err := LoadScenarios("testdata")
	if err != nil {
		t.Fatal(err)
	}
	scenarios = append(scenarios, ManyServices(manyServices))
	var only *regexp.Regexp
	if o := os.Getenv(OnlyEnv); o != "" {
		if only, err = regexp.Compile(o); err != nil {
			t.Fatalf("%s: %v", OnlyEnv, err)
		}
	}
	api := lab.StartAPIServer(t, lab.WithDualStackServices())
	// client-go's default of 5 requests a second would spend most of a
	// scenario creating and deleting its objects.
	cfg := rest.CopyConfig(api.Config)
	cfg.QPS, cfg.Burst = 500, 1000
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(api.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	var results []Result
	start := time.Now()
	for i, sc := range scenarios {
		if only != nil && !only.MatchString(sc.Name) {
			continue
		}
		r := &scenarioRun{sc: sc, client: client, apiAddr: u.Host, kubeconfig: api.KubeconfigPath,
			kubeProxy: kubeProxyBin, kproxy: kproxyBin, prefix: fmt.Sprintf("%s%d-%d-", NetnsPrefix, os.Getpid(), i)}
		t.Run(sc.Name, func(t *testing.T) {
			r.t = t
			r.run(ctx)
		})
		results = append(results, r.results...)
	}
	if path := os.Getenv(ReportEnv); path != "" {
		notes := fmt.Sprintf("Run took %v. Reproduce: `sudo env %s=%s %s=%s go test -count=1 -v -run TestSameNFTablesAsKubeProxy ./bench/nftcompare/`.",
			time.Since(start).Round(time.Second), lab.ToolsBinEnv, os.Getenv(lab.ToolsBinEnv), ReportEnv, path) +
			" Scenarios: bench/nftcompare/testdata/*.yaml; \"(then)\" is the state after the scenario's `kind: Then` changes," +
			" compared once every table has been stable for 3 s. Each scenario also runs kube-proxy twice, whose tables" +
			" must match (the normalisation leaves no run-dependent detail), and masquerade-all a control kube-proxy" +
			" without the flag, whose tables must differ (the comparison sees real differences)."
		if err := os.WriteFile(path, []byte(Report(results, time.Now(), notes)), 0o644); err != nil {
			t.Errorf("writing the report: %v", err)
		}
	}
}

type scenarioRun struct {
	t                         *testing.T
	sc                        *Scenario
	client                    kubernetes.Interface
	apiAddr, kubeconfig       string
	kubeProxy, kproxy, prefix string
	results                   []Result
	// compared are the tables the last compare read, by run and family.
	compared map[string]map[string]string
}

// The proxy runs of a scenario.
const (
	kubeProxyA = "kube-proxy"
	kubeProxyB = "kube-proxy-again"
	kproxyRun  = "kproxy"
	// A kube-proxy run with the scenario's control flags: its tables must
	// differ from kube-proxy's, or the harness cannot see a difference.
	controlRun = "kube-proxy-control"
)

// run runs the scenario, leaving its results in r.results (also when it
// fails half way).
func (r *scenarioRun) run(ctx context.Context) {
	t := r.t
	begin := time.Now()
	t.Cleanup(func() {
		r.deleteObjects(context.Background())
		t.Logf("scenario %s took %v", r.sc.Name, time.Since(begin).Round(100*time.Millisecond))
	})
	r.createObjects(ctx)

	// Before the namespaces' cleanups, so the logs outlive them.
	logDir := t.TempDir()
	common := []string{
		"--kubeconfig=" + r.kubeconfig,
		"--hostname-override=" + r.sc.Node.Name,
		"--proxy-mode=nftables",
		// Conntrack settings are global or absent in a namespace: leave them.
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
	}
	flags := append(slices.Clone(common), r.sc.Flags...)
	if r.sc.Config != "" {
		// kube-proxy ignores most flags next to --config: the file says
		// everything.
		path := filepath.Join(logDir, "config.yaml")
		cfg := strings.NewReplacer("{{kubeconfig}}", r.kubeconfig, "{{node}}", r.sc.Node.Name).Replace(r.sc.Config)
		if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		flags = append([]string{"--config=" + path}, r.sc.Flags...)
	}
	type proxyRun struct {
		name, bin string
		flags     []string
	}
	runs := []proxyRun{{kubeProxyA, r.kubeProxy, flags}, {kubeProxyB, r.kubeProxy, flags}, {kproxyRun, r.kproxy, flags}}
	if c := r.sc.Control; c != nil {
		runs = append(runs, proxyRun{controlRun, r.kubeProxy, append(slices.Clone(common), c.Flags...)})
	}
	nss := map[string]*ProxyNetns{}
	for i, run := range runs {
		ns, err := NewProxyNetns(fmt.Sprintf("%s%d", r.prefix, i), r.apiAddr, r.sc.HostAddresses)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s log (last 6000 bytes):\n%s", run.name, tailOf(ns.Log(), 6000))
			}
			if err := ns.Close(); err != nil {
				t.Error(err)
			}
		})
		if err := ns.Start(filepath.Join(logDir, run.name+".log"), run.bin, append(run.flags, "-v=2")...); err != nil {
			t.Fatal(err)
		}
		nss[run.name] = ns
	}

	r.compare(ctx, nss, "", r.sc.Services)
	t.Logf("first tables compared after %v", time.Since(begin).Round(100*time.Millisecond))
	if r.sc.Then != nil {
		r.applyChanges(ctx)
		r.compare(ctx, nss, "then", r.sc.AllServicesThen())
		t.Logf("tables after the changes compared after %v", time.Since(begin).Round(100*time.Millisecond))
	}
}

// compare waits for the proxies' tables and compares them, as
// subtests <phase>/<family> (or <family>), and checks that both proxies
// serve the health-check node ports of services. Every run and family is
// waited for in parallel: kube-proxy syncs within seconds of starting; a
// kproxy that does not sync within the same minute is compared as it is.
func (r *scenarioRun) compare(ctx context.Context, nss map[string]*ProxyNetns, phase string, services []*v1.Service) {
	t := r.t
	expected := ExpectedNames(services)
	tables := map[string]map[string]string{}
	problems := map[string]map[string]string{}
	for run := range nss {
		tables[run], problems[run] = map[string]string{}, map[string]string{}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for run, ns := range nss {
		wg.Go(func() {
			before := r.compared[run] // nil in the first phase
			got, errs := waitRun(ctx, ns, expected, before)
			// kube-proxy writes its rule for unallocated ClusterIPs in full
			// syncs only, and learns the service ranges from an informer
			// it does not wait for: when its first sync came first, the
			// next full sync is an hour away. Restarting it (a full sync
			// from scratch) is the only way to get its settled state, as
			// it is when kube-proxy missed the node's zone (missedZone).
			for attempt := 1; run != kproxyRun && attempt <= 3; attempt++ {
				why := ""
				switch {
				case lacksUnallocated(got, errs):
					why = "its first sync came before it knew the service ranges"
				case r.sc.Node.Labels[v1.LabelTopologyZone] != "" && missedZone(ns):
					why = "it missed the node's zone at start"
				}
				if why == "" {
					break
				}
				r.t.Logf("%s: restart %d, %s", run, attempt, why)
				if err := ns.Restart(); err != nil {
					errs = map[string]error{families()[0]: err}
					break
				}
				got, errs = waitRun(ctx, ns, expected, before)
			}
			if run != kproxyRun && lacksUnallocated(got, errs) {
				errs[families()[0]] = fmt.Errorf("no rule for unallocated ClusterIPs after 3 restarts")
			}
			mu.Lock()
			defer mu.Unlock()
			for _, fam := range families() {
				tables[run][fam] = got[fam]
				if errs[fam] != nil {
					problems[run][fam] = errs[fam].Error()
				}
			}
		})
	}
	wg.Wait()
	r.compared = tables
	if dir := os.Getenv(DumpEnv); dir != "" {
		for run, byFamily := range tables {
			for fam, table := range byFamily {
				name := r.sc.Name
				if phase != "" {
					name += "-" + phase
				}
				if err := os.WriteFile(filepath.Join(dir, name+"-"+run+"-"+fam+".nft"), []byte(table), 0o644); err != nil {
					t.Errorf("%s: %v", DumpEnv, err)
				}
			}
		}
	}

	scenario := r.sc.Name
	if phase != "" {
		scenario += " (" + phase + ")"
	}
	for _, fam := range families() {
		res := Result{Scenario: scenario, Family: fam}
		name := fam
		if phase != "" {
			name = phase + "/" + fam
		}
		t.Run(name, func(t *testing.T) {
			for _, run := range []string{kubeProxyA, kubeProxyB} {
				if p := problems[run][fam]; p != "" {
					res.Problem = run + " did not sync: " + p
					t.Fatalf("%s did not sync: %s", run, p)
				}
			}
			a, b, k := tables[kubeProxyA][fam], tables[kubeProxyB][fam], tables[kproxyRun][fam]
			if d := UnifiedDiff(kubeProxyA, kubeProxyB, a, b); d != "" {
				res.SelfDiff = d
				t.Errorf("two kube-proxy runs on the same objects differ after normalisation (fix the normaliser):\n%s", d)
			}
			res.Diff = UnifiedDiff("kube-proxy "+fam, "kproxy "+fam, a, k)
			if p := problems[kproxyRun][fam]; p != "" {
				res.Problem = p
				if k == "" {
					res.Problem += "\n" + tailOf(nss[kproxyRun].Log(), 3000)
				}
				t.Errorf("kproxy: %s", p)
			}
			unexplained := Unexplained(r.sc.Name, fam, a, k, knownDifferences())
			res.Unexplained = len(unexplained)
			if len(unexplained) > 0 {
				t.Errorf("kproxy's %s table differs from kube-proxy's in %d lines no known difference explains:\n%s",
					fam, len(unexplained), res.Diff)
			} else if res.Diff != "" {
				t.Logf("known differences only:\n%s", res.Diff)
			}
		})
		r.results = append(r.results, res)
	}
	if _, ok := nss[controlRun]; ok && phase == "" {
		t.Run("control", func(t *testing.T) {
			for _, fam := range families() {
				if p := problems[controlRun][fam]; p != "" {
					t.Fatalf("the control run did not sync: %s", p)
				}
				if UnifiedDiff("", "", tables[kubeProxyA][fam], tables[controlRun][fam]) == "" {
					t.Errorf("%s: kube-proxy with the control flags %q wrote the same table as with %q: the comparison cannot see a difference",
						fam, r.sc.Control.Flags, r.sc.Flags)
				}
			}
		})
	}
	if ports := HealthCheckNodePorts(services); len(ports) > 0 {
		name := "health-check-node-ports"
		if phase != "" {
			name = phase + "/" + name
		}
		t.Run(name, func(t *testing.T) {
			for _, run := range []string{kubeProxyA, kproxyRun} {
				listening, err := nss[run].ListeningTCPPorts(ctx)
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range ports {
					if !listening[p] {
						t.Errorf("%s does not listen on health-check node port %d", run, p)
					}
				}
			}
		})
	}
}

// waitRun waits for both families' tables of one proxy, in parallel.
func waitRun(ctx context.Context, ns *ProxyNetns, expected map[string][]string, before map[string]string) (tables map[string]string, errs map[string]error) {
	tables, errs = map[string]string{}, map[string]error{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, fam := range families() {
		wg.Go(func() {
			table, err := waitSynced(ctx, ns, fam, expected[fam], before[fam], 60*time.Second)
			mu.Lock()
			defer mu.Unlock()
			tables[fam], errs[fam] = table, err
		})
	}
	wg.Wait()
	return tables, errs
}

// missedZone tells whether the proxy's current run logged that its node
// has no zone. kube-proxy v1.36 registers its topology handler after the
// node informer that feeds it has started; when the node's first event
// passes first, kube-proxy ignores zone hints until the zone changes, which
// in this lab, with no kubelet, never happens; a restart mends it.
func missedZone(ns *ProxyNetns) bool {
	log, err := os.ReadFile(ns.LogPath)
	if err != nil {
		return false
	}
	if i := bytes.LastIndex(log, []byte("\n=== ")); i >= 0 {
		log = log[i:] // the current run's lines (Start writes the header)
	}
	return bytes.Contains(log, []byte("since node is missing label"))
}

// lacksUnallocated says whether synced tables lack kube-proxy's rule for
// unallocated ClusterIPs.
func lacksUnallocated(tables map[string]string, errs map[string]error) bool {
	for _, fam := range families() {
		if errs[fam] == nil && !strings.Contains(tables[fam], unallocatedClusterIPs) {
			return true
		}
	}
	return false
}

// waitSynced polls the family's table until it holds every expected
// service and has not changed for stableFor, and returns it normalised. (A
// proxy's first sync may come before it knows everything: kube-proxy adds
// the rule for unallocated ClusterIPs only once its ServiceCIDR informer has
// synced; see compare.) A table still the same as before (the normalised
// table of the phase before the changes, "" in the first) must hold for
// unchangedFor instead: a proxy slowed by a busy machine may not have seen
// the changes yet (kube-proxy once showed the old source ranges after 3 s).
// On timeout, or when the proxy exits, it returns the last table it read
// and an error saying what was missing.
func waitSynced(ctx context.Context, ns *ProxyNetns, family string, expected []string, before string, timeout time.Duration) (string, error) {
	const stableFor, unchangedFor = 3 * time.Second, 20 * time.Second
	deadline := time.Now().Add(timeout)
	var last, prev string
	var stableSince time.Time
	var lastErr error
	for {
		raw, err := ns.ListTable(ctx, family)
		if err == nil {
			var missing []string
			for _, e := range expected {
				if !holds(raw, e) {
					missing = append(missing, e)
				}
			}
			last, err = Normalize(raw)
			switch {
			case err != nil:
				err = fmt.Errorf("normalising the %s table: %w", family, err)
			case len(missing) > 0:
				err = fmt.Errorf("the %s table lacks services %v", family, missing)
			case last != prev:
				stableSince = time.Now()
				err = fmt.Errorf("the %s table still changes", family)
			case last == before && time.Since(stableSince) < unchangedFor:
				err = fmt.Errorf("the %s table is still the one before the changes", family)
			case time.Since(stableSince) >= stableFor:
				return last, nil
			}
			prev = last
		}
		lastErr = err
		select {
		case <-ns.Exited():
			return last, fmt.Errorf("exited (%v) before its %s table was synced; last: %v", ns.ExitErr(), family, lastErr)
		case <-time.After(500 * time.Millisecond):
		case <-ctx.Done():
			return last, ctx.Err()
		}
		if time.Now().After(deadline) {
			return last, fmt.Errorf("not synced after %v: %v", timeout, lastErr)
		}
	}
}

// holds says whether a raw listing has a service "ns/name" (its chains
// carry "ns/name/proto/port", the elements of one without endpoints
// "ns/name:port").
func holds(raw, want string) bool {
	return strings.Contains(raw, want+"/") || strings.Contains(raw, want+":")
}

func (r *scenarioRun) createObjects(ctx context.Context) {
	t := r.t
	n := r.sc.Node
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{v1.LabelHostname: n.Name}},
		Spec:       v1.NodeSpec{PodCIDRs: n.PodCIDRs},
	}
	for k, v := range n.Labels {
		node.Labels[k] = v
	}
	if len(n.PodCIDRs) > 0 {
		node.Spec.PodCIDR = n.PodCIDRs[0]
	}
	created, err := r.client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating node %s: %v", n.Name, err)
	}
	for _, a := range n.Addresses {
		created.Status.Addresses = append(created.Status.Addresses, v1.NodeAddress{Type: v1.NodeInternalIP, Address: a})
	}
	created.Status.Addresses = append(created.Status.Addresses, v1.NodeAddress{Type: v1.NodeHostName, Address: n.Name})
	created.Status.Conditions = []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue,
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now(), Reason: "KubeletReady"}}
	if _, err := r.client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("setting the status of node %s: %v", n.Name, err)
	}
	namespaces := map[string]bool{}
	for _, svc := range r.allServices() {
		namespaces[svc.Namespace] = true
	}
	for ns := range namespaces {
		_, err := r.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating namespace %s: %v", ns, err)
		}
	}
	for _, svc := range r.sc.Services {
		r.putService(ctx, svc)
	}
	for _, es := range r.sc.EndpointSlices {
		r.putEndpointSlice(ctx, es)
	}
}

// applyChanges makes the scenario's Then changes.
func (r *scenarioRun) applyChanges(ctx context.Context) {
	t := r.t
	for _, d := range r.sc.Then.Delete {
		kind, nsName, _ := strings.Cut(d, " ")
		ns, name, _ := strings.Cut(nsName, "/")
		var err error
		if kind == "Service" {
			err = r.client.CoreV1().Services(ns).Delete(ctx, name, metav1.DeleteOptions{})
		} else {
			err = r.client.DiscoveryV1().EndpointSlices(ns).Delete(ctx, name, metav1.DeleteOptions{})
		}
		if err != nil {
			t.Fatalf("deleting %s: %v", d, err)
		}
	}
	for _, svc := range r.sc.Then.Services {
		r.putService(ctx, svc)
	}
	for _, es := range r.sc.Then.EndpointSlices {
		r.putEndpointSlice(ctx, es)
	}
}

// putService creates the service, or replaces the one of the same name,
// and writes its load-balancer status if it has one.
func (r *scenarioRun) putService(ctx context.Context, svc *v1.Service) {
	t := r.t
	client := r.client.CoreV1().Services(svc.Namespace)
	want := svc.DeepCopy()
	// A create of an existing service fails on its cluster IP first, so
	// look before.
	old, err := client.Get(ctx, svc.Name, metav1.GetOptions{})
	var s *v1.Service
	switch {
	case apierrors.IsNotFound(err):
		s, err = client.Create(ctx, svc.DeepCopy(), metav1.CreateOptions{})
	case err == nil:
		upd := svc.DeepCopy()
		upd.ResourceVersion = old.ResourceVersion
		s, err = client.Update(ctx, upd, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("writing service %s/%s: %v", svc.Namespace, svc.Name, err)
	}
	if len(want.Status.LoadBalancer.Ingress) > 0 || len(s.Status.LoadBalancer.Ingress) > 0 {
		s.Status = want.Status
		if _, err := client.UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("setting the status of service %s/%s: %v", svc.Namespace, svc.Name, err)
		}
	}
}

// putEndpointSlice creates the slice or replaces the one of the same name.
func (r *scenarioRun) putEndpointSlice(ctx context.Context, es *discovery.EndpointSlice) {
	client := r.client.DiscoveryV1().EndpointSlices(es.Namespace)
	_, err := client.Create(ctx, es.DeepCopy(), metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		var old *discovery.EndpointSlice
		if old, err = client.Get(ctx, es.Name, metav1.GetOptions{}); err == nil {
			upd := es.DeepCopy()
			upd.ResourceVersion = old.ResourceVersion
			_, err = client.Update(ctx, upd, metav1.UpdateOptions{})
		}
	}
	if err != nil {
		r.t.Fatalf("writing endpoint slice %s/%s: %v", es.Namespace, es.Name, err)
	}
}

// allServices and allEndpointSlices are every object the scenario writes.
func (r *scenarioRun) allServices() []*v1.Service {
	if r.sc.Then == nil {
		return r.sc.Services
	}
	return append(slices.Clone(r.sc.Services), r.sc.Then.Services...)
}

func (r *scenarioRun) allEndpointSlices() []*discovery.EndpointSlice {
	if r.sc.Then == nil {
		return r.sc.EndpointSlices
	}
	return append(slices.Clone(r.sc.EndpointSlices), r.sc.Then.EndpointSlices...)
}

// deleteObjects removes the scenario's objects and waits until they are
// gone, so the next scenario's proxies do not see them.
func (r *scenarioRun) deleteObjects(ctx context.Context) {
	t := r.t
	var errs []error
	del := func(what string, err error) {
		if err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("deleting %s: %w", what, err))
		}
	}
	for _, es := range r.allEndpointSlices() {
		del("endpoint slice "+es.Name, r.client.DiscoveryV1().EndpointSlices(es.Namespace).Delete(ctx, es.Name, metav1.DeleteOptions{}))
	}
	for _, svc := range r.allServices() {
		del("service "+svc.Name, r.client.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{}))
	}
	del("node "+r.sc.Node.Name, r.client.CoreV1().Nodes().Delete(ctx, r.sc.Node.Name, metav1.DeleteOptions{}))
	deadline := time.Now().Add(30 * time.Second)
	for _, svc := range r.allServices() {
		for {
			_, err := r.client.CoreV1().Services(svc.Namespace).Get(ctx, svc.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break
			}
			if time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("service %s/%s still there after 30 s", svc.Namespace, svc.Name))
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
}

func tailOf(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
