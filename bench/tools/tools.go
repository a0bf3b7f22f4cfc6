//go:build tools

// Package tools pins the reference Kubernetes binaries kproxy's tests run
// against: kube-apiserver, kube-proxy and kubeadm (whose kube-proxy add-on
// manifests bench/deploy compares deploy/ with), built from the Go module
// proxy. make cluster-tools builds the rest of a cluster from the same
// module: kubelet, kube-controller-manager, kube-scheduler and kubectl
// (bench/cluster), and make conformance-tools upstream's e2e test binary,
// agnhost (conformance.go) and a small CoreDNS (coredns/, its own module).
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
