package cluster

import (
	"context"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// The cluster DNS: CoreDNS answering for Services and pods from the API,
// under the names clusters usually give it (kube-dns), so pods' lookups and
// the specs that read its Service find it.
const (
	dnsName      = "coredns"
	dnsService   = "kube-dns"
	dnsNamespace = "kube-system"
	// dnsTimeout bounds the wait for CoreDNS's pods to be ready.
	dnsTimeout = 2 * time.Minute
	// dnsReplicas: one pod per node of a two-node cluster, so a spec that
	// drains or breaks a node still resolves names.
	dnsReplicas = 2
)

// corefile serves the cluster domain and reverse lookups and nothing else:
// no upstream is reachable from the namespaces.
const corefile = `.:53 {
    errors
    health :8080
    ready :8181
    kubernetes ` + ClusterDomain + ` in-addr.arpa ip6.arpa {
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }
    cache 30
}
`

// clusterDNS is the kubelets' clusterDNS: none without CoreDNS.
func (c *cluster) clusterDNS() string {
	if c.cfg.CoreDNS == "" {
		return ""
	}
	return ClusterDNSIP
}

// dnsObjects returns what runs the cluster DNS, in creation order.
func dnsObjects() []runtime.Object {
	labels := map[string]string{"k8s-app": dnsService}
	replicas := int32(dnsReplicas)
	probe := func(path string, port int) *v1.Probe {
		return &v1.Probe{
			ProbeHandler:  v1.ProbeHandler{HTTPGet: &v1.HTTPGetAction{Path: path, Port: intstr.FromInt32(int32(port))}},
			PeriodSeconds: 2,
		}
	}
	return []runtime.Object{
		&v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: dnsName, Namespace: dnsNamespace}},
		&rbacv1.ClusterRole{
			ObjectMeta: metav1.ObjectMeta{Name: "kproxy-cluster:" + dnsName},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{""}, Resources: []string{"services", "pods", "namespaces"}, Verbs: []string{"list", "watch"}},
				{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kproxy-cluster:" + dnsName},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "kproxy-cluster:" + dnsName},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: dnsName, Namespace: dnsNamespace}},
		},
		&v1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: dnsName, Namespace: dnsNamespace}, Data: map[string]string{"Corefile": corefile}},
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: dnsName, Namespace: dnsNamespace, Labels: labels},
			Spec: appsv1.DeploymentSpec{
				Replicas: &replicas,
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: v1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: v1.PodSpec{
						ServiceAccountName: dnsName,
						// Its own lookups cannot go through itself.
						DNSPolicy: v1.DNSDefault,
						Containers: []v1.Container{{
							Name:            dnsName,
							Image:           CoreDNSImage,
							ImagePullPolicy: v1.PullNever,
							Args:            []string{"-conf", "/etc/coredns/Corefile"},
							Ports: []v1.ContainerPort{
								{Name: "dns", ContainerPort: 53, Protocol: v1.ProtocolUDP},
								{Name: "dns-tcp", ContainerPort: 53, Protocol: v1.ProtocolTCP},
							},
							VolumeMounts:   []v1.VolumeMount{{Name: "config", MountPath: "/etc/coredns", ReadOnly: true}},
							LivenessProbe:  probe("/health", 8080),
							ReadinessProbe: probe("/ready", 8181),
						}},
						Volumes: []v1.Volume{{Name: "config", VolumeSource: v1.VolumeSource{
							ConfigMap: &v1.ConfigMapVolumeSource{LocalObjectReference: v1.LocalObjectReference{Name: dnsName}},
						}}},
					},
				},
			},
		},
		&v1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: dnsService, Namespace: dnsNamespace, Labels: labels},
			Spec: v1.ServiceSpec{
				Selector:  labels,
				ClusterIP: ClusterDNSIP,
				Ports: []v1.ServicePort{
					{Name: "dns", Port: 53, Protocol: v1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Port: 53, Protocol: v1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
				},
			},
		},
	}
}

// deployDNS creates the cluster DNS and waits for its pods to be ready.
func (c *cluster) deployDNS(ctx context.Context, client kubernetes.Interface) error {
	for _, obj := range dnsObjects() {
		if err := create(ctx, client, obj); err != nil {
			return err
		}
	}
	return WaitFor(ctx, dnsTimeout, "CoreDNS ready", func(ctx context.Context) error {
		d, err := client.AppsV1().Deployments(dnsNamespace).Get(ctx, dnsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ReadyReplicas != dnsReplicas {
			return fmt.Errorf("%d of %d CoreDNS pods ready", d.Status.ReadyReplicas, dnsReplicas)
		}
		return nil
	})
}
