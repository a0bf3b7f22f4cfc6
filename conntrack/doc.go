// Package conntrack keeps the kernel's connection tracking in step with the
// service map, so no UDP or SCTP client stays pinned to a destination that
// is gone.
//
// Two jobs:
//
//   - Tune sets the conntrack sysctls at start-up from kube-proxy's
//     --conntrack-* flags (table size, hash size, TCP and UDP timeouts).
//     What cannot be set (a read-only /proc/sys, nf_conntrack_max inside a
//     network namespace) is reported back; nothing else depends on it.
//   - Cleaner runs after every successful sync (it is a sync/engine
//     observer). From the sync's change set it derives Filters: flows to a
//     deleted service address or node port, flows answered by an endpoint
//     that stopped serving, and flows that no NAT rewrote to a service that
//     just got its first endpoint. All filters of one family go to the
//     kernel in one pass over the table. Every so often it also reconciles:
//     any UDP flow to a service address whose answer does not come from
//     where the mode sends such traffic (a serving endpoint for kernel NAT,
//     a live local relay port for the userspace mode) is deleted, so nothing
//     the event path missed lives on.
//
// TCP flows are never deleted: the kernel ends them on its own (resets,
// timeouts), and deleting an established TCP flow would break a connection
// that may still work.
//
// The kernel is reached through Table, one operation wide; NetlinkTable is
// the real one and fakeconntrack the fake that tests use.
package conntrack
