//go:build tools

// Package tools pins the reference Kubernetes binaries kproxy's tests run
// against: kube-apiserver, kube-proxy and kubeadm (whose kube-proxy add-on
// manifests bench/deploy compares deploy/ with), built from the Go module
// proxy.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kubeadm"
)
