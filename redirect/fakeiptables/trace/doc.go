// Package trace follows a new connection's first packet through an
// iptables-save dump of the nat and filter tables the way netfilter would,
// and says where it ends up: accepted (to which address and port, after
// DNAT or REDIRECT, and whether it is masqueraded on the way out), dropped
// or rejected. Random load balancing (-m statistic) is followed both ways,
// so a Result lists every reachable endpoint with its probability.
//
// It exists so tests of the proxy modes can assert what their rules do to
// traffic rather than how the rules are spelled, on dumps from
// fakeiptables or from the real kernel alike. It reads the match and target
// vocabulary kproxy's modes emit; anything else (an unknown match, target
// or option, -m set, rules in the mangle or raw tables) is an error naming
// it, never silently skipped. A dump whose chains jump in a loop is an
// error, as the kernel refuses to load one.
//
// The model of a new connection: conntrack state NEW, not DNATed until a
// DNAT or REDIRECT in nat PREROUTING or OUTPUT rewrote it (from then on
// "--ctstate DNAT" matches and --ctorigdst/--ctorigdstport still see the
// original destination), never SNATed while filter chains run. An affinity
// check (-m recent --rcheck or --update) finds no entry, as for a client
// seen for the first time; the Path records that it was passed.
//
// Hooks, in netfilter's order:
//   - Forwarded (from another host): nat PREROUTING; then, when the possibly
//     rewritten destination is local, filter INPUT and nat INPUT, else
//     filter FORWARD and nat POSTROUTING.
//   - Local (sent by the node): nat OUTPUT, filter OUTPUT, nat POSTROUTING;
//     then, when the destination is local, filter INPUT (through lo).
package trace
