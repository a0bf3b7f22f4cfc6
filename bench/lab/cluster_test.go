package lab

import (
	"fmt"
	"os"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// TestCluster builds a two-node lab without any proxy and checks its
// routing: pods reach pods on their own and on the other node with their
// addresses intact, the outside client reaches every node, nodes reach the
// API server through their loopback relay; and once the subtest has ended,
// that no namespace is left.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts kube-apiserver and etcd")
	}
	if InFreshNetns(t) {
		return
	}
	var namespaces []string
	t.Run("build and reach", func(t *testing.T) {
		c := NewCluster(t, ClusterOptions{Nodes: 2, Pods: []string{"web", "client"}})
		namespaces = c.Namespaces()
		api := StartAPIServer(t)
		c.ServeAPI(t, api)
		c.RegisterNodes(t, api.Client)
		dataDir := t.TempDir()
		for _, n := range c.Nodes {
			p := StartNginx(t, n.Pod("web"), dataDir)
			if err := p.WaitListening("tcp", NginxPort, serverReadyTimeout); err != nil {
				t.Fatal(err)
			}
		}
		for _, from := range c.Nodes {
			for _, to := range c.Nodes {
				web := to.Pod("web")
				name := fmt.Sprintf("%s to %s", from.Pod("client").Name, web.Name)
				got, err := HTTPGet(from.Pod("client"), fmt.Sprintf("http://%s:%d%s", web.IPv4, NginxPort, ClientAddressURLPath))
				if want := web.Name + " " + from.Pod("client").IPv4.String(); err != nil || got != want {
					t.Errorf("%s: got %q (%v), want %q", name, got, err, want)
				}
			}
			web := from.Pod("web")
			got, err := HTTPGet(c.Client, fmt.Sprintf("http://%s:%d%s", web.IPv4, NginxPort, ClientAddressURLPath))
			if want := web.Name + " " + c.Client.IPv4.String(); err != nil || got != want {
				t.Errorf("the outside client to %s (routed by the router): got %q (%v), want %q", web.Name, got, err, want)
			}
			// The admin kubeconfig's address, dialled from the node.
			cfg := rest.CopyConfig(api.Config)
			cfg.Dial = from.DialContext
			client, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.CoreV1().Nodes().Get(t.Context(), from.Name, metav1.GetOptions{}); err != nil {
				t.Errorf("%s cannot use the API server through its relay: %v", from.Name, err)
			}
		}
		nodes, err := api.Client.CoreV1().Nodes().List(t.Context(), metav1.ListOptions{})
		if err != nil || len(nodes.Items) != 2 || nodes.Items[0].Spec.PodCIDR != c.Nodes[0].PodCIDR.String() {
			t.Errorf("nodes registered: %v (%v)", nodes, err)
		}
	})
	for _, ns := range namespaces {
		if _, err := os.Stat(netnsDir + "/" + ns); err == nil {
			t.Errorf("namespace %s left after the test", ns)
		}
	}
}
