// Package proxies swaps the node proxy of a running local cluster
// (package bench/cluster) from one configuration to the next: kproxy in
// each of its modes through deploy/base/kproxy.yaml, and the reference
// kube-proxy through a kubeadm-shaped DaemonSet and ConfigMap. Between two
// configurations the previous DaemonSet is deleted, its pods are waited
// out, its kernel state is removed on every node (the proxy's own
// --cleanup, run in the node's network namespace), and the cluster's
// Services are checked to answer no more; the next one then counts as
// ready once its pods are and the Services answer again from every node.
package proxies
