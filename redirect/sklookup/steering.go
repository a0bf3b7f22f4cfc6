package sklookup

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Steering is the program attached to one network namespace and its maps.
// Its methods are safe for concurrent use.
//
// What it does not cover: the kernel looks up established TCP connections and
// connected UDP sockets (an exact four-tuple match) before it runs the
// program, so a process that connect()s a UDP socket bound to a service
// address and port to one client's address and port still receives that
// client's datagrams.
//
// A dropped lookup (a Drop target, a guarded address's other ports, an empty
// slot) leaves the packet with no socket, so the kernel answers as for a
// closed port: a TCP reset, an ICMP port unreachable for UDP.
type Steering struct {
	mu      sync.Mutex
	targets *ebpf.Map // mapKey → uint32 Action
	guarded *ebpf.Map // mapKey (Port, Proto 0) → uint8 1
	sockets *ebpf.Map // uint32 Slot → socket
	prog    *ebpf.Program
	link    *link.NetNsLink
	insns   int
	written kernelState // what the maps hold, as written by Sync
	stale   bool        // a write failed: re-read the maps before the next diff
	perKey  bool        // the kernel has no batch map operations
	retries int         // map writes retried after ENOMEM, for benchmarks
	closed  bool
}

// objects are the loaded maps and program, not yet attached.
type objects struct {
	targets, guarded, sockets *ebpf.Map
	prog                      *ebpf.Program
	insns                     int
}

func (o *objects) close() error {
	var errs []error
	if o.prog != nil {
		errs = append(errs, o.prog.Close())
	}
	for _, m := range []*ebpf.Map{o.targets, o.guarded, o.sockets} {
		if m != nil {
			errs = append(errs, m.Close())
		}
	}
	return errors.Join(errs...)
}

// load creates the maps and loads the program over them.
func load() (*objects, error) {
	o := &objects{}
	if err := o.load(); err != nil {
		return nil, errors.Join(err, o.close())
	}
	return o, nil
}

func (o *objects) load() error {
	var err error
	specs := []struct {
		m    **ebpf.Map
		spec *ebpf.MapSpec
	}{
		{&o.targets, &ebpf.MapSpec{Name: "kproxy_targets", Type: ebpf.Hash, KeySize: keySize, ValueSize: 4,
			MaxEntries: MaxTargets, Flags: unix.BPF_F_NO_PREALLOC}},
		{&o.guarded, &ebpf.MapSpec{Name: "kproxy_guarded", Type: ebpf.Hash, KeySize: keySize, ValueSize: 1,
			MaxEntries: MaxGuarded, Flags: unix.BPF_F_NO_PREALLOC}},
		{&o.sockets, &ebpf.MapSpec{Name: "kproxy_sockets", Type: ebpf.SockMap, KeySize: 4, ValueSize: 8,
			MaxEntries: uint32(slotCount)}},
	}
	for _, s := range specs {
		if *s.m, err = ebpf.NewMap(s.spec); err != nil {
			return fmt.Errorf("creating BPF map %s (%s): %w", s.spec.Name, s.spec.Type, err)
		}
	}
	insns := program(o.targets.FD(), o.guarded.FD(), o.sockets.FD())
	o.insns = len(insns)
	o.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "kproxy_sklookup",
		Type:         ebpf.SkLookup,
		AttachType:   ebpf.AttachSkLookup,
		Instructions: insns,
	})
	if err != nil {
		return fmt.Errorf("loading the sk_lookup program: %w", err)
	}
	return nil
}

// Attach loads the maps and the program and attaches it to the network
// namespace at netnsPath: /proc/thread-self/ns/net, with the thread locked,
// for the caller's own (the main thread's, /proc/self/ns/net, can be in
// another namespace). Needs CAP_BPF and CAP_NET_ADMIN (or CAP_SYS_ADMIN). Until SetSocket fills the
// slots and Sync the targets, every packet takes the kernel's own lookup.
func Attach(netnsPath string) (*Steering, error) {
	o, err := load()
	if err != nil {
		return nil, hint(err)
	}
	ns, err := os.Open(netnsPath)
	if err != nil {
		_ = o.close()
		return nil, fmt.Errorf("opening network namespace: %w", err)
	}
	defer ns.Close()
	l, err := link.AttachNetNs(int(ns.Fd()), o.prog)
	if err != nil {
		_ = o.close()
		return nil, hint(fmt.Errorf("attaching the sk_lookup program to %s: %w", netnsPath, err))
	}
	return newSteering(o, l), nil
}

// newSteering takes over the loaded objects and the link (nil: not attached).
func newSteering(o *objects, l *link.NetNsLink) *Steering {
	return &Steering{
		targets: o.targets, guarded: o.guarded, sockets: o.sockets, prog: o.prog, link: l, insns: o.insns,
		written: newKernelState(),
	}
}

// Instructions is the length of the loaded program, for logs.
func (s *Steering) Instructions() int { return s.insns }

// SetSocket puts the socket behind c into slot, replacing the one there. TCP
// slots take a listening plain-TCP socket (not MPTCP: the kernel refuses
// those), UDP slots an unconnected bound UDP socket; an IPv6 slot takes only
// an AF_INET6 socket, an IPv4 slot an AF_INET socket or a dual-stack AF_INET6
// one. The map holds the socket, not the descriptor: closing the socket
// removes it from the slot, and the slot's traffic is then dropped. The
// socket can be bound anywhere (127.0.0.1:0 will do): accepted connections
// and received datagrams carry the service address as their local address.
func (s *Steering) SetSocket(slot Slot, c syscall.Conn) error {
	if slot >= slotCount {
		return fmt.Errorf("setting %s: no such slot", slot)
	}
	if c == nil {
		return fmt.Errorf("setting %s: no socket", slot)
	}
	raw, err := c.SyscallConn()
	if err != nil {
		return fmt.Errorf("setting %s: %w", slot, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("setting %s: steering closed", slot)
	}
	var opErr error
	if err := raw.Control(func(fd uintptr) {
		if opErr = checkSocket(int(fd), slot); opErr != nil {
			return
		}
		if err := s.sockets.Update(uint32(slot), uint64(fd), ebpf.UpdateAny); err != nil {
			opErr = fmt.Errorf("the kernel refused the socket (a TCP socket must be listening, a UDP one bound): %w", err)
		}
	}); err != nil {
		return fmt.Errorf("setting %s: %w", slot, err)
	}
	if opErr != nil {
		return fmt.Errorf("setting %s: %w", slot, opErr)
	}
	return nil
}

// checkSocket refuses a socket the program could not assign for slot, which
// would make every packet of the slot drop.
func checkSocket(fd int, slot Slot) error {
	proto, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_PROTOCOL)
	if err != nil {
		return fmt.Errorf("reading the socket's protocol: %w", err)
	}
	if proto == unix.IPPROTO_MPTCP {
		return errors.New("an MPTCP socket cannot be steered; listen with net.ListenConfig.SetMultipathTCP(false)")
	}
	if want := slot.protocol(); proto != int(want) {
		return fmt.Errorf("socket protocol %d, want %s", proto, want)
	}
	domain, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	if err != nil {
		return fmt.Errorf("reading the socket's family: %w", err)
	}
	switch {
	case domain != unix.AF_INET && domain != unix.AF_INET6:
		return fmt.Errorf("socket family %d is not IP", domain)
	case (slot%discardingOffset == TCP6 || slot%discardingOffset == UDP6) && domain != unix.AF_INET6:
		return errors.New("an IPv6 slot needs an AF_INET6 socket")
	}
	return nil
}

// Sync makes the target and guarded maps equal to targets and guarded,
// writing only what differs from the last Sync (after a failed write it first
// reads the maps back). Its cost in Go grows with the input, its writes with
// the difference. Invalid input changes nothing. Additions are written
// before removals: during a Sync a service port is steered, dropped or
// guarded, never open to the kernel's own lookup before it is removed.
func (s *Steering) Sync(targets map[Target]Action, guarded []netip.Addr) error {
	return s.change("sync", func(k *kernelState) (changes, error) { return k.compare(targets, guarded) })
}

// Patch is Sync given only what changed: targets to set (added, or with a
// new action), targets to delete, and guarded addresses to add and delete.
// Its cost follows the change, where Sync's follows the whole input. A
// target or address both set and deleted is set. Invalid input changes
// nothing; additions are written before removals, as by Sync.
func (s *Steering) Patch(set map[Target]Action, del []Target, addGuarded, delGuarded []netip.Addr) error {
	return s.change("patch", func(k *kernelState) (changes, error) { return k.diff(set, del, addGuarded, delGuarded) })
}

// change writes what plan lists against the record of the maps, read back
// from the kernel first after a failed write.
func (s *Steering) change(what string, plan func(*kernelState) (changes, error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("%s: steering closed", what)
	}
	if s.stale {
		have, err := s.readBack()
		if err != nil {
			return err
		}
		s.written, s.stale = have, false
	}
	d, err := plan(&s.written)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return s.write(what, d)
}

// write makes the kernel's maps take the changes d, additions first.
func (s *Steering) write(what string, d changes) error {
	steps := []struct {
		what string
		do   func() error
	}{
		{"adding guarded addresses", func() error { return update(s, s.guarded, d.addGuarded, guardedValues(len(d.addGuarded))) }},
		{"writing targets", func() error { return update(s, s.targets, d.setTargetKeys, d.setTargetValues) }},
		{"removing targets", func() error { return s.remove(s.targets, d.delTargets) }},
		{"removing guarded addresses", func() error { return s.remove(s.guarded, d.delGuarded) }},
	}
	for _, step := range steps {
		if err := step.do(); err != nil {
			s.stale = true
			return fmt.Errorf("%s: %s: %w", what, step.what, err)
		}
	}
	s.written.apply(d)
	return nil
}

// update writes keys and values, in one batch where the kernel can (5.6+),
// else one key at a time. ENOMEM is retried while writes make progress: since
// Linux 6.1 a hash map without preallocation takes its elements from per-CPU
// caches the kernel refills asynchronously (irq_work), and a long write can
// empty them; where irq_work waits for the timer tick (user-mode Linux) that
// happens every few elements.
func update[V any](s *Steering, m *ebpf.Map, keys []mapKey, values []V) error {
	var wait backoff
	for done := 0; done < len(keys); {
		n, err := s.updateSome(m, keys[done:], values[done:])
		done += n
		switch {
		case err == nil:
		case errors.Is(err, unix.ENOMEM):
			s.retries++
			if err := wait.after(n > 0); err != nil {
				return fmt.Errorf("%d of %d written: %w", done, len(keys), err)
			}
		default:
			return err
		}
	}
	return nil
}

// updateSome writes keys from the start and says how many it wrote.
func (s *Steering) updateSome(m *ebpf.Map, keys []mapKey, values any) (int, error) {
	if !s.perKey {
		n, err := m.BatchUpdate(keys, values, nil)
		if !errors.Is(err, ebpf.ErrNotSupported) {
			return n, err
		}
		s.perKey = true
	}
	switch vs := values.(type) {
	case []uint32:
		for i, k := range keys {
			if err := m.Update(k, vs[i], ebpf.UpdateAny); err != nil {
				return i, err
			}
		}
	case []uint8:
		for i, k := range keys {
			if err := m.Update(k, vs[i], ebpf.UpdateAny); err != nil {
				return i, err
			}
		}
	default:
		return 0, fmt.Errorf("map values of type %T", values)
	}
	return len(keys), nil
}

// backoff spaces out retries of a kernel allocation failure and gives up
// after noProgressLimit without progress.
type backoff struct {
	delay, stalled time.Duration
}

const noProgressLimit = 10 * time.Second

func (b *backoff) after(progress bool) error {
	if progress {
		b.delay, b.stalled = 0, 0
	}
	if b.stalled >= noProgressLimit {
		return fmt.Errorf("the kernel could not allocate map elements for %v: %w", b.stalled, unix.ENOMEM)
	}
	b.delay = min(max(2*b.delay, time.Millisecond), 64*time.Millisecond)
	time.Sleep(b.delay)
	b.stalled += b.delay
	return nil
}

// remove deletes keys, in one batch where the kernel can. A key already gone
// is not an error.
func (s *Steering) remove(m *ebpf.Map, keys []mapKey) error {
	if len(keys) == 0 {
		return nil
	}
	if !s.perKey {
		_, err := m.BatchDelete(keys, nil)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, ebpf.ErrNotSupported):
			s.perKey = true
		case !errors.Is(err, ebpf.ErrKeyNotExist):
			return err
		}
		// A batch stops at a missing key; finish one at a time.
	}
	for _, k := range keys {
		if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
	return nil
}

// readBack reads both hash maps.
func (s *Steering) readBack() (kernelState, error) {
	have := newKernelState()
	var k mapKey
	var action uint32
	it := s.targets.Iterate()
	for it.Next(&k, &action) {
		have.targets[k] = &entry{value: action}
	}
	if err := it.Err(); err != nil {
		return kernelState{}, fmt.Errorf("sync: reading the targets map back: %w", err)
	}
	var one uint8
	it = s.guarded.Iterate()
	for it.Next(&k, &one) {
		have.guarded[k] = &entry{value: uint32(one)}
	}
	if err := it.Err(); err != nil {
		return kernelState{}, fmt.Errorf("sync: reading the guarded map back: %w", err)
	}
	return have, nil
}

// Close detaches the program (the kernel's own lookup is back at once) and
// releases the maps; sockets in the slots stay open, they belong to the
// caller.
func (s *Steering) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if s.link != nil {
		errs = append(errs, s.link.Close())
	}
	errs = append(errs, (&objects{targets: s.targets, guarded: s.guarded, sockets: s.sockets, prog: s.prog}).close())
	return errors.Join(errs...)
}
