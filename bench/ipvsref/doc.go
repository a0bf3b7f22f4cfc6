// Package ipvsref compares what kproxy's --proxy-mode=ipvs programs with
// what kube-proxy v1.36's IPVS proxier programs from the same objects, in a
// guest kernel that has IPVS (see bench/guest).
//
// TestGuestSameIPVSStateAsKubeProxy runs, per services file, kube-proxy's
// proxier (the ipvsref command of bench/tools, which drives it as a library
// for one sync) in one fresh network namespace and kproxy in another, both
// on a node link with the same addresses, then compares normalised dumps of
// the two namespaces: IPVS virtual and real servers, the KUBE-* ipsets and
// their members, kube-ipvs0 and its addresses, the KUBE-* part of the
// iptables nat and filter tables of both families, and the sysctls the mode
// sets. The package's non-test files capture and normalise those dumps.
package ipvsref
