// Package ipvs is kube-proxy's IPVS proxy mode. Mode (a sync/mode.Mode)
// runs, per family and per sync: desired.Build, reconcile.Sync, one
// iptables-restore of the static layer when its text changed (or on a full
// sync or after a failed restore) with the jumps into it, and the sysctls
// the mode needs; a background loop drains removed TCP real servers. Its
// sub-packages split the rest by job:
//
//   - desired: from a service-map snapshot and the node's configuration, the
//     state the kernel should hold (virtual servers, real servers, addresses
//     on kube-ipvs0, ipset members, the static iptables layer, sysctls). Pure.
//   - handles: the narrow interfaces over the IPVS handle, the dummy link's
//     addresses and ipsets, with their real netlink implementations.
//   - fakeipvs: in-memory fakes of those interfaces that fail like the kernel.
//   - reconcile: applies the difference between desired and current state,
//     one virtual server at a time, with graceful termination of real servers.
package ipvs
