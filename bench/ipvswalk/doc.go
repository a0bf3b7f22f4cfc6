// Package walk says where a new connection lands under the IPVS mode's
// desired state: it renders the state's iptables layer the way the mode
// writes it (desired.RenderTables restored into fakeiptables, then the jumps
// from the built-in chains inserted as restore.Runner.EnsureJumps does), gives the
// state's ipsets and virtual servers to the packet tracer
// (redirect/netfilter/fakeiptables/trace), and reports each way the first packet can
// end: at which real server (with its weight and the scheduler), whether it
// is masqueraded, or which rule dropped or rejected it.
//
// A Walker is built once per state and walks any number of packets. The
// tracer's model applies (see its package documentation): netfilter's hook
// order with IPVS scheduling at LOCAL_IN for packets from elsewhere and at
// LOCAL_OUT for the node's own, a connection never seen before (no
// persistence template), real servers sharing new connections by weight.
package ipvswalk
