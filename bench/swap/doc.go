// Package swap replaces kube-proxy by kproxy on a running multi-node lab
// cluster (bench/lab.NewCluster), node by node as a DaemonSet rolling update
// does, and back again, while continuous traffic counts every request: the
// live-swap check. Its test also asserts the cross-node
// semantics (masquerade to remote endpoints, externalTrafficPolicy: Local,
// health-check node ports) on every node with each proxy.
package swap
