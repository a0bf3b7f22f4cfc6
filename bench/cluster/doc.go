// Package cluster brings up a local Kubernetes cluster on one machine, for
// trying kproxy as a real cluster runs it: from its image, through
// deploy/base/kproxy.yaml, started by each node's kubelet. Every node is a network
// namespace with its own containerd and kubelet; the control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler) runs in a router
// namespace that joins the nodes, and a forwarder on the host's loopback
// reaches the API server for kubectl.
//
//	host: 127.0.0.1:APIPort → (forwarder) → router 198.19.0.1:6443
//	router kpc-router: br-nodes 198.19.0.1/24, etcd on its loopback,
//	   |               routes each node's pod range to the node
//	   +-- veth -- node-1 kpc-node-1 eth0 198.19.0.11, pods 198.19.16.0/24
//	   +-- veth -- node-2 kpc-node-2 eth0 198.19.0.12, pods 198.19.17.0/24
//	                  ...
//	Service VIPs: 198.18.0.0/16; the kubernetes Service is 198.18.0.1.
//
// Pods are attached by the CNI ptp plugin (a veth per pod, routed by the
// node) rather than a bridge: a bridged pod's reply to a pod on the same
// node would skip the node's netfilter (and the proxy's NAT) without
// br_netfilter, a host-wide module.
//
// Processes are tracked by cgroup, not by pid: every process of the cluster
// (daemons, shims, containers) lives under the cgroup kproxy-cluster in
// every cgroup v1 hierarchy, so Down finds and stops them all. Files live in
// the state directory; the few paths the daemons insist on outside it are
// recorded when Up creates them and removed by Down, and so are the host
// kernel settings the kubelets change.
package cluster
