package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
)

// manifestEdit is one change to deploy/base/kproxy.yaml: the values an operator
// sets (the API server endpoint, the pod network) and the conntrack settings
// this machine needs.
type manifestEdit struct {
	from, to, why string
}

func manifestEdits() []manifestEdit {
	return []manifestEdit{
		{"api-server: https://control-plane.invalid:6443", "api-server: " + APIServerURL(), "the control-plane endpoint"},
		{`clusterCIDR: ""`, "clusterCIDR: " + PodCIDR, "the pod network"},
		{`    mode: ""`, `    mode: ""
    # A node here is a network namespace: nf_conntrack_max is the host's,
    # and cannot be written from it. Leave it as it is.
    conntrack:
      maxPerCore: 0
      min: 0`, "conntrack limits left to the host"},
	}
}

// RenderManifest returns deploy/base/kproxy.yaml with the cluster's values. Each
// edit must apply exactly once, so a changed manifest fails here rather
// than deploying the placeholder.
func RenderManifest(manifest string) (string, error) {
	for _, e := range manifestEdits() {
		if n := strings.Count(manifest, e.from); n != 1 {
			return "", fmt.Errorf("setting %s: the manifest holds %q %d times, want once", e.why, e.from, n)
		}
		manifest = strings.Replace(manifest, e.from, e.to, 1)
	}
	return manifest, nil
}

// DecodeManifest splits a multi-document manifest into API objects.
func DecodeManifest(manifest string) ([]runtime.Object, error) {
	var objs []runtime.Object
	for i, doc := range strings.Split(manifest, "\n---\n") {
		if strings.TrimSpace(stripComments(doc)) == "" {
			continue
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode([]byte(doc), nil, nil)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i+1, err)
		}
		objs = append(objs, obj)
	}
	return objs, nil
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, line := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// deployKproxy creates deploy/base/kproxy.yaml's objects, with the cluster's
// values, through the API.
func (c *cluster) deployKproxy(ctx context.Context, client kubernetes.Interface) error {
	data, err := os.ReadFile(c.cfg.Manifest)
	if err != nil {
		return fmt.Errorf("reading the manifest: %w", err)
	}
	manifest, err := RenderManifest(string(data))
	if err != nil {
		return fmt.Errorf("%s: %w", c.cfg.Manifest, err)
	}
	objs, err := DecodeManifest(manifest)
	if err != nil {
		return fmt.Errorf("%s: %w", c.cfg.Manifest, err)
	}
	return Apply(ctx, client, objs)
}

// Apply creates objects of the kinds a node proxy's manifest and the
// cluster DNS hold; one that exists already is left as it is.
func Apply(ctx context.Context, client kubernetes.Interface, objs []runtime.Object) error {
	for _, obj := range objs {
		if err := create(ctx, client, obj); err != nil {
			return err
		}
	}
	return nil
}

// create creates one object of the kinds deploy/base/kproxy.yaml and the
// cluster DNS hold; one that exists already is left as it is.
func create(ctx context.Context, client kubernetes.Interface, obj runtime.Object) error {
	var err error
	var name string
	opts := metav1.CreateOptions{}
	switch o := obj.(type) {
	case *v1.ServiceAccount:
		name = "ServiceAccount " + o.Name
		_, err = client.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, opts)
	case *v1.ConfigMap:
		name = "ConfigMap " + o.Name
		_, err = client.CoreV1().ConfigMaps(o.Namespace).Create(ctx, o, opts)
	case *rbacv1.ClusterRoleBinding:
		name = "ClusterRoleBinding " + o.Name
		_, err = client.RbacV1().ClusterRoleBindings().Create(ctx, o, opts)
	case *rbacv1.ClusterRole:
		name = "ClusterRole " + o.Name
		_, err = client.RbacV1().ClusterRoles().Create(ctx, o, opts)
	case *appsv1.DaemonSet:
		name = "DaemonSet " + o.Name
		_, err = client.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, opts)
	case *appsv1.Deployment:
		name = "Deployment " + o.Name
		_, err = client.AppsV1().Deployments(o.Namespace).Create(ctx, o, opts)
	case *v1.Service:
		name = "Service " + o.Name
		_, err = client.CoreV1().Services(o.Namespace).Create(ctx, o, opts)
	default:
		return fmt.Errorf("creating a %T: the cluster applies no such object", obj)
	}
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating %s: %w", name, err)
	}
	return nil
}
