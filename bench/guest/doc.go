// Package guest runs test binaries in a guest kernel that has what this
// host's kernel lacks: IPVS, SCTP sockets, and the modules kproxy loads on
// a normal node. The guest is Debian's user-mode-linux (a Linux 6.1 kernel
// that runs as an ordinary process, no KVM; apt-get install
// user-mode-linux kmod, which .ci/install-deps does).
//
// # How a run works
//
// bin/guest-exec (cmd/guest-exec) is a `go test -exec` helper. For each
// test binary it
//
//  1. makes a run directory in $TMPDIR (UML's control sockets; guest RAM
//     is a file in /dev/shm, a tmpfs, when it has room, else here) with a
//     shared/ directory holding
//     run.json: the binary, its arguments, environment, working directory
//     and the modules to load;
//  2. boots linux.uml with the host's root filesystem as a read-only hostfs
//     root, itself as init, and three consoles on pipes: console 0 (kernel
//     messages, kept in console.log) and two that carry the binary's stdout
//     and stderr back as it runs;
//  3. as the guest's PID 1 (RunInit) it builds a writable root (an overlay:
//     the host's files below, guest RAM above, so tests can write anywhere
//     and the host is never touched), mounts /proc, /sys, /dev, /run, links
//     /usr/lib/uml/modules into /lib/modules, mounts shared/ read-write,
//     modprobes DefaultModules plus any asked for (see "A guest without
//     netfilter" for the other set), brings lo up, runs the
//     binary with EnvInGuest=1, writes its exit code to shared/, and powers
//     off;
//  4. exits with that exit code. A deadline (the binary's -test.timeout
//     plus a minute), a signal or a failed boot kills the whole UML process
//     group; the run directory is always removed (-keep keeps it).
//
// Inside, the kernel loads further modules on demand, iptables has only
// the legacy backend (kproxy's detection picks it by itself), nf_tables
// loads but has none of its ip, ip6 and inet families (so no nftables
// mode; TestGuestNFTablesHasNoIPFamilies), and syscalls
// are ~60 times slower than on the host: build on the host, run only test
// binaries inside. A boot to the binary's first line takes about 3 s.
//
// # Adding a guest test
//
// Name it TestGuest… and start it with SkipUnlessInGuest, so it skips on
// the host naming `make test-guest`:
//
//	func TestGuestIPVSSync(t *testing.T) {
//		guest.SkipUnlessInGuest(t)
//		...
//	}
//
// then add its package to GUEST_TEST_PKGS in the Makefile. Run one by hand
// with
//
//	go build -o bin/guest-exec ./bench/guest/cmd/guest-exec
//	go test -exec "$PWD/bin/guest-exec" -run '^TestGuest' ./your/pkg/
//
// Extra modules: `-exec "$PWD/bin/guest-exec -modules ip_vs_lc,xt_ipvs"`
// or KPROXY_GUEST_MODULES, or run modprobe from the test. Tests that need
// a network namespace of their own use lab.InFreshNetns as on the host.
//
// # A guest without netfilter
//
// `-exec "$PWD/bin/guest-exec -netfilter=false"` (or
// KPROXY_GUEST_NETFILTER=off) boots a guest like a node whose kernel lacks
// netfilter: it loads only NoNetfilterModules (IPv6, SCTP and the hmac
// its listeners need, veth, bridge; no dummy), then writes 1 to
// /proc/sys/kernel/modules_disabled, so neither modprobe nor the kernel's
// on-demand loading (iptables asking for a table) can add one. Before the
// program runs, the init checks that every installed iptables,
// iptables-legacy, iptables-nft and ip6tables variant fails on
// `-t nat -S`, that /proc/modules lists no netfilter module
// (IsNetfilterModule) and that /proc/net has no ip_tables_names,
// nf_conntrack or ip_vs; else the boot fails saying which. Only the
// netfilter core, which has no tables, is built into this kernel
// (/proc/net/netfilter/nf_log is all it shows). Tests see such a guest
// with WithoutNetfilter (the init sets KPROXY_GUEST_NETFILTER=off for the
// program, "on" in other guests); SkipWithoutNetfilter skips one that
// needs netfilter there, SkipUnlessWithoutNetfilter one that needs its
// absence elsewhere.
package guest
