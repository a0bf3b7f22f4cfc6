// Package trace follows a new connection's first packet through an
// iptables-save dump of the nat and filter tables the way netfilter would,
// and says where it ends up: accepted (to which address and port, after
// DNAT, REDIRECT or IPVS, and whether it is masqueraded on the way out),
// dropped or rejected. Random load balancing (-m statistic) and IPVS's
// choice of real server are followed every way, so a Result lists every
// reachable endpoint with its probability.
//
// It exists so tests of the proxy modes can assert what their rules do to
// traffic rather than how the rules are spelled, on dumps from
// fakeiptables or from the real kernel alike. It reads the match and target
// vocabulary kproxy's modes emit; anything else (an unknown match, target
// or option, rules in the mangle or raw tables) is an error naming it,
// never silently skipped. "-m set" is traced only when Node.Sets gives the
// sets' members. A dump whose chains jump in a loop is an error, as the
// kernel refuses to load one.
//
// The model of a new connection: conntrack state NEW, not DNATed until a
// DNAT or REDIRECT in nat PREROUTING or OUTPUT rewrote it (from then on
// "--ctstate DNAT" matches and --ctorigdst/--ctorigdstport still see the
// original destination; IPVS's rewrite does not count as DNAT), never
// SNATed while filter chains run. An affinity check (-m recent --rcheck or
// --update) finds no entry, as for a client seen for the first time; the
// Path records that it was passed. IPVS persistence likewise has no
// template yet, so the scheduler decides.
//
// Hooks, in netfilter's order:
//   - Forwarded (from another host): nat PREROUTING; then, when the possibly
//     rewritten destination is local, filter INPUT and IPVS (LOCAL_IN),
//     else filter FORWARD and nat POSTROUTING. A packet IPVS sends to a
//     real server elsewhere leaves through filter OUTPUT and nat
//     POSTROUTING (the kernel sends it again from LOCAL_OUT); any other
//     goes on to nat INPUT and is delivered.
//   - Local (sent by the node): nat OUTPUT, IPVS (LOCAL_OUT), filter
//     OUTPUT, nat POSTROUTING; then, when the destination is local, filter
//     INPUT (through lo).
//
// IPVS (Node.VirtualServers) takes a packet whose protocol, destination
// address and port are a virtual server's and rewrites its destination to
// a real server, as kube-proxy's masquerading virtual servers do; one
// without a real server of positive weight answers ICMP port unreachable
// (Rejected). "-m ipvs" then matches the packet by its virtual server.
package trace
