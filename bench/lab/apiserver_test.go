package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

func TestAPIServerLab(t *testing.T) {
	if InFreshNetns(t) {
		return
	}
	api := StartAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	node := CreateNode(t, api.Client, "lab-node", "198.19.0.10")
	got, err := api.Client.CoreV1().Nodes().Get(ctx, "lab-node", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting node: %v", err)
	}
	if len(got.Status.Addresses) == 0 || got.Status.Addresses[0] != (v1.NodeAddress{Type: v1.NodeInternalIP, Address: "198.19.0.10"}) {
		t.Errorf("node addresses = %v, want InternalIP 198.19.0.10 first", got.Status.Addresses)
	}
	if node.UID != got.UID {
		t.Errorf("CreateNode returned UID %s, stored node has %s", node.UID, got.UID)
	}

	// The kubeconfig file must work on its own, as kube-proxy would use it.
	cfg, err := clientcmd.BuildConfigFromFlags("", api.KubeconfigPath)
	if err != nil {
		t.Fatalf("loading kubeconfig: %v", err)
	}
	fromFile, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	svc := &v1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: metav1.NamespaceDefault},
		Spec:       v1.ServiceSpec{Ports: []v1.ServicePort{{Port: 80}}},
	}
	created, err := fromFile.CoreV1().Services(metav1.NamespaceDefault).Create(ctx, svc, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service through the kubeconfig: %v", err)
	}
	if !inServiceCIDR(created.Spec.ClusterIP) {
		t.Errorf("cluster IP %q not allocated from %s", created.Spec.ClusterIP, ServiceCIDR)
	}

	// Restart: etcd keeps the data, the server comes back on the same URL.
	api.Stop()
	if _, err := api.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "web", metav1.GetOptions{}); err == nil {
		t.Fatal("API server still answers after Stop")
	}
	api.Start()
	again, err := api.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("getting service after restart: %v", err)
	}
	if again.UID != created.UID {
		t.Errorf("service UID changed across restart: %s -> %s", created.UID, again.UID)
	}

	// A kube-apiserver that exits before it is ready, as one whose start-up
	// check overran does, is started again.
	api.Stop()
	marker := filepath.Join(t.TempDir(), "exited-once")
	wrapper := t.TempDir()
	script := fmt.Sprintf(`#!/bin/sh
if [ ! -e %[1]s ]; then
	touch %[1]s
	echo 'F1130 12:00:00.000000 1 hooks.go:203] PostStartHook "lab-test" failed: overran'
	exit 255
fi
exec %[2]s "$@"
`, marker, filepath.Join(api.binDir, "kube-apiserver"))
	if err := os.WriteFile(filepath.Join(wrapper, "kube-apiserver"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	api.binDir = wrapper
	api.Start()
	if _, err := api.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "web", metav1.GetOptions{}); err != nil {
		t.Fatalf("getting service after a start that exited once: %v", err)
	}
	log, err := os.ReadFile(api.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(log), `PostStartHook "lab-test" failed`); n != 1 {
		t.Errorf("the early exit is in the log %d times, want once", n)
	}
}

func TestFatalLines(t *testing.T) {
	for _, tc := range []struct {
		name, log, want string
	}{
		{"no fatal line", "=== start\nI1130 12:00:00.000000 1 a.go:1] fine\n", "(none)"},
		{"the fatal line of the last run only",
			"=== start\nF1130 11:00:00.000000 1 a.go:1] old\n=== start\nI1130 12:00:00.000000 1 a.go:1] fine\nF1130 12:00:01.000000 1 hooks.go:203] new\ngoroutine 1 [running]:\n",
			"F1130 12:00:01.000000 1 hooks.go:203] new"},
		{"a line that only starts with F", "=== start\nFailed to start\nF\n", "(none)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "log")
			if err := os.WriteFile(path, []byte(tc.log), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := fatalLines(path); got != tc.want {
				t.Errorf("fatalLines = %q, want %q", got, tc.want)
			}
		})
	}
}

func inServiceCIDR(ip string) bool {
	addr, err := netip.ParseAddr(ip)
	return err == nil && netip.MustParsePrefix(ServiceCIDR).Contains(addr)
}
