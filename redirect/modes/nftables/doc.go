// Package nftables is kube-proxy's nftables mode: table kube-proxy in the ip
// and ip6 families, its chains, sets and verdict maps built by
// redirect/modes/nftables/rules as the same text kube-proxy writes, one
// family (family.go) per IP family.
//
// It converges faster than kube-proxy by writing less, and by writing it
// without nft where nft is slow:
//
//   - A full sync (start, after a failure, hourly, or after someone else
//     changed the table) is one nft transaction through knftables
//     (family.fullSync). With the netlink writer the policy chains' DNAT
//     rules follow in netlink batches of deferredPerBatch chains
//     (writeDeferred): nft names each rule's anonymous map by scanning
//     every set of the table, which dominates kube-proxy's full sync.
//   - A partial sync (family.partialSync) rewrites only the changed ports'
//     chains, affinity sets and map elements, as a list of operations
//     (ops.go). They go to the kernel as one nf_tables netlink batch
//     (netlink.go: the same messages nft sends for the same text, checked by
//     the kernel tests) and through nft only for what the encoder does not
//     cover. A large change is written portsPerChunk ports at a time until
//     the sync's budget is spent; the rest waits as the backlog, behind
//     the ports traffic already reaches (family.chunkedSync).
//   - Damage is found cheaply: the mode reads nf_tables' generation and,
//     only when it moved, the canary chain's rule count and the shared
//     maps' element counts over netlink (family.damaged, lister.go).
//     Missing elements are written again; anything else makes the next
//     sync full.
//
// The mode remembers what it wrote per port and per element, to diff
// against; after any failure it forgets, and the next sync is full and
// lists the kernel's objects to remove leftovers. Stale chains are flushed
// first and deleted staleChainDelay later, as kube-proxy does.
package nftables
