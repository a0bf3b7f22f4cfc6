package lab

import "strings"

// APIServerOption changes how StartAPIServer starts the server.
type APIServerOption func(*APIServer)

// WithDualStackServices makes the API server dual-stack, IPv4 first: it
// allocates IPv6 ClusterIPs from ServiceCIDR6 (the topology's IPv6 VIP range) and accepts IPv6 and
// dual-stack Services. A range can only be given by flag at start; a
// ServiceCIDR object of the other family is refused for Services.
func WithDualStackServices() APIServerOption {
	return func(a *APIServer) {
		for i, arg := range a.args {
			if strings.HasPrefix(arg, "--service-cluster-ip-range=") {
				a.args[i] = "--service-cluster-ip-range=" + ServiceCIDR + "," + ServiceCIDR6
			}
		}
	}
}

// WithPrivilegedContainers lets the API server take privileged containers
// (--allow-privileged, as kubeadm runs it), such as kube-proxy's and
// kproxy's DaemonSets; without it they are refused as disallowed by cluster
// policy.
func WithPrivilegedContainers() APIServerOption {
	return func(a *APIServer) {
		a.args = append(a.args, "--allow-privileged=true")
	}
}

// WithRBAC authorizes requests by RBAC (with the bootstrap ClusterRoles
// such as system:node-proxier) instead of allowing every request; the
// admin client, in system:masters, may still do anything.
func WithRBAC() APIServerOption {
	return func(a *APIServer) {
		for i, arg := range a.args {
			if strings.HasPrefix(arg, "--authorization-mode=") {
				a.args[i] = "--authorization-mode=RBAC"
			}
		}
	}
}
