package nftcompare

import (
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
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"kproxy.dev/kproxy/bench/lab"
)

// Environment the test reads (the namespace child inherits it).
const (
	// ReportEnv names a file the test writes its markdown report to.
	ReportEnv = "KPROXY_NFTCOMPARE_REPORT"
	// OnlyEnv is a regexp: only scenarios whose name matches run.
	OnlyEnv = "KPROXY_NFTCOMPARE_ONLY"
)

// knownDifferences are the intended differences between kube-proxy's tables
// and kproxy's, each with its reason. The test fails on any other.
var knownDifferences = []KnownDifference{}

// unallocatedClusterIPs ends kube-proxy's rule that drops traffic to
// addresses of the service ranges no Service holds.
const unallocatedClusterIPs = `drop comment "Drop traffic to unallocated ClusterIPs"`

// families are the nftables families both proxies write a kube-proxy table in.
var families = []string{"ip", "ip6"}

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
	scenarios, err := LoadScenarios("testdata")
	if err != nil {
		t.Fatal(err)
	}
	var only *regexp.Regexp
	if o := os.Getenv(OnlyEnv); o != "" {
		if only, err = regexp.Compile(o); err != nil {
			t.Fatalf("%s: %v", OnlyEnv, err)
		}
	}
	api := lab.StartAPIServer(t, lab.WithDualStackServices())
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
		t.Run(sc.Name, func(t *testing.T) {
			r := &scenarioRun{t: t, sc: sc, client: api.Client, apiAddr: u.Host, kubeconfig: api.KubeconfigPath,
				kubeProxy: kubeProxyBin, kproxy: kproxyBin, prefix: fmt.Sprintf("nftc-%d-%d-", os.Getpid(), i)}
			results = append(results, r.run(ctx)...)
		})
	}
	if path := os.Getenv(ReportEnv); path != "" {
		notes := fmt.Sprintf("Run took %v. Reproduce: `sudo env %s=%s %s=%s go test -count=1 -v -run TestSameNFTablesAsKubeProxy ./bench/nftcompare/`.",
			time.Since(start).Round(time.Second), lab.ToolsBinEnv, os.Getenv(lab.ToolsBinEnv), ReportEnv, path)
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
}

// The three proxy runs of a scenario.
const (
	kubeProxyA = "kube-proxy"
	kubeProxyB = "kube-proxy-again"
	kproxyRun  = "kproxy"
)

func (r *scenarioRun) run(ctx context.Context) []Result {
	t := r.t
	t.Cleanup(func() { r.deleteObjects(context.Background()) })
	r.createObjects(ctx)

	flags := append([]string{
		"--kubeconfig=" + r.kubeconfig,
		"--hostname-override=" + r.sc.Node.Name,
		"--proxy-mode=nftables",
		// Conntrack settings are global or absent in a namespace: leave them.
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
	}, r.sc.Flags...)
	runs := []struct{ name, bin string }{{kubeProxyA, r.kubeProxy}, {kubeProxyB, r.kubeProxy}, {kproxyRun, r.kproxy}}
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
		if err := ns.Start(filepath.Join(t.TempDir(), run.name+".log"), run.bin, append(flags, "-v=2")...); err != nil {
			t.Fatal(err)
		}
		nss[run.name] = ns
	}

	// Wait for all three in parallel: kube-proxy syncs within seconds of
	// starting; a kproxy that does not sync within the same minute is
	// compared as it is.
	expected := r.sc.ExpectedNames()
	tables := map[string]map[string]string{}
	problems := map[string]map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, run := range runs {
		wg.Go(func() {
			for _, fam := range families {
				want := expected[fam]
				if run.bin == r.kubeProxy {
					// Written once kube-proxy's ServiceCIDR informer has
					// synced, which may be after its first sync.
					want = append(slices.Clone(want), unallocatedClusterIPs)
				}
				table, err := waitSynced(ctx, nss[run.name], fam, want, 60*time.Second)
				mu.Lock()
				if tables[run.name] == nil {
					tables[run.name], problems[run.name] = map[string]string{}, map[string]string{}
				}
				tables[run.name][fam] = table
				if err != nil {
					problems[run.name][fam] = err.Error()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()

	var results []Result
	for _, fam := range families {
		res := Result{Scenario: r.sc.Name, Family: fam}
		t.Run(fam, func(t *testing.T) {
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
				if tables[kproxyRun][fam] == "" {
					res.Problem += "\n" + tailOf(nss[kproxyRun].Log(), 3000)
				}
				t.Errorf("kproxy: %s", p)
			}
			unexplained := Unexplained(r.sc.Name, fam, a, k, knownDifferences)
			res.Unexplained = len(unexplained)
			if len(unexplained) > 0 {
				t.Errorf("kproxy's %s table differs from kube-proxy's in %d lines no known difference explains:\n%s",
					fam, len(unexplained), res.Diff)
			} else if res.Diff != "" {
				t.Logf("known differences only:\n%s", res.Diff)
			}
		})
		results = append(results, res)
	}
	return results
}

// waitSynced polls the family's table until it holds every expected
// service and has not changed for stableFor, and returns it normalised. (A
// proxy's first sync may come before it knows everything: kube-proxy adds
// the rule for unallocated ClusterIPs only once its ServiceCIDR informer has
// synced.) On timeout, or when the proxy exits, it returns the last table it
// read and an error saying what was missing.
func waitSynced(ctx context.Context, ns *ProxyNetns, family string, expected []string, timeout time.Duration) (string, error) {
	const stableFor = 3 * time.Second
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
// "ns/name:port"), or the unallocatedClusterIPs rule.
func holds(raw, want string) bool {
	if want == unallocatedClusterIPs {
		return strings.Contains(raw, want)
	}
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
	for _, svc := range r.sc.Services {
		namespaces[svc.Namespace] = true
	}
	for ns := range namespaces {
		_, err := r.client.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("creating namespace %s: %v", ns, err)
		}
	}
	for _, svc := range r.sc.Services {
		want := svc.DeepCopy()
		s, err := r.client.CoreV1().Services(svc.Namespace).Create(ctx, svc.DeepCopy(), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("creating service %s/%s: %v", svc.Namespace, svc.Name, err)
		}
		if len(want.Status.LoadBalancer.Ingress) > 0 {
			s.Status = want.Status
			if _, err := r.client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, s, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("setting the status of service %s/%s: %v", svc.Namespace, svc.Name, err)
			}
		}
	}
	for _, es := range r.sc.EndpointSlices {
		if _, err := r.client.DiscoveryV1().EndpointSlices(es.Namespace).Create(ctx, es.DeepCopy(), metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating endpoint slice %s/%s: %v", es.Namespace, es.Name, err)
		}
	}
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
	for _, es := range r.sc.EndpointSlices {
		del("endpoint slice "+es.Name, r.client.DiscoveryV1().EndpointSlices(es.Namespace).Delete(ctx, es.Name, metav1.DeleteOptions{}))
	}
	for _, svc := range r.sc.Services {
		del("service "+svc.Name, r.client.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{}))
	}
	del("node "+r.sc.Node.Name, r.client.CoreV1().Nodes().Delete(ctx, r.sc.Node.Name, metav1.DeleteOptions{}))
	deadline := time.Now().Add(30 * time.Second)
	for _, svc := range r.sc.Services {
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
