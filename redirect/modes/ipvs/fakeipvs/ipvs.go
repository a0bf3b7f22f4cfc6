// Package fakeipvs holds in-memory fakes of the IPVS mode's kernel
// interfaces (redirect/modes/ipvs/handles) that fail like the kernel: ESRCH for a
// missing service, ENOENT for a missing destination or unknown scheduler,
// EEXIST for duplicates, ipset's IPSET_ERR_BUSY for sets in use. The
// contract tests in redirect/modes/ipvs/handles run the same calls on these and on
// the real kernel and compare. Every call is counted, and a Hook can make
// any call fail, so tests can measure and break a reconciler.
package fakeipvs

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"syscall"

	"github.com/moby/ipvs"

	"kproxy.dev/kproxy/redirect/modes/ipvs/desired"
	"kproxy.dev/kproxy/redirect/modes/ipvs/handles"
)

// Hook is called before every operation with its name ("NewService") and
// target ("TCP/198.18.0.10:80", "TCP/198.18.0.10:80 -> 198.19.1.11:8080");
// a non-nil error fails the call without effect.
type Hook func(op, target string) error

// Counter counts calls per operation name.
type Counter struct {
	mu  sync.Mutex
	ops map[string]int
}

func (c *Counter) count(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ops == nil {
		c.ops = make(map[string]int)
	}
	c.ops[op]++
}

// Ops returns a copy of the per-operation counts.
func (c *Counter) Ops() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int, len(c.ops))
	for k, v := range c.ops {
		out[k] = v
	}
	return out
}

// Total is the number of calls so far.
func (c *Counter) Total() int {
	n := 0
	for _, v := range c.Ops() {
		n += v
	}
	return n
}

// Reset zeroes the counts.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops = nil
}

// Calls is what every fake has: its calls counted, and a Hook that can
// fail them.
type Calls struct {
	Counter
	Hook Hook
}

// begin counts the call and runs the hook.
func (c *Calls) begin(op, target string) error {
	c.count(op)
	if c.Hook != nil {
		if err := c.Hook(op, target); err != nil {
			return fmt.Errorf("%s %s: %w", op, target, err)
		}
	}
	return nil
}

// schedulers the fake kernel has modules for.
var schedulers = []string{"rr", "wrr", "lc", "wlc", "lblc", "lblcr", "dh", "sh", "sed", "nq", "fo", "ovf", "mh", "twos"}

type fakeService struct {
	svc   ipvs.Service
	dests map[netip.AddrPort]*ipvs.Destination
}

// IPVS is a fake handles.IPVS. The zero value is an empty table.
type IPVS struct {
	Calls

	mu       sync.Mutex
	services map[desired.Key]*fakeService
}

var _ handles.IPVS = (*IPVS)(nil)

func keyOf(s *ipvs.Service) (desired.Key, error) {
	vs, ok := handles.FromService(s)
	if !ok {
		return desired.Key{}, syscall.EINVAL
	}
	return vs.Key, nil
}

func destKey(d *ipvs.Destination) (netip.AddrPort, error) {
	rs, ok := handles.FromDestination(d)
	if !ok {
		return netip.AddrPort{}, syscall.EINVAL
	}
	return rs.AddrPort(), nil
}

// serviceName is the target a service's operations are hooked on.
func serviceName(s *ipvs.Service) string {
	k, _ := keyOf(s)
	return k.String()
}

func (f *IPVS) lookup(s *ipvs.Service) (desired.Key, *fakeService, error) {
	k, err := keyOf(s)
	if err != nil {
		return k, nil, err
	}
	fs, ok := f.services[k]
	if !ok {
		return k, nil, syscall.ESRCH
	}
	return k, fs, nil
}

func (f *IPVS) GetServices() ([]*ipvs.Service, error) {
	if err := f.begin("GetServices", ""); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := sortedKeys(f.services)
	out := make([]*ipvs.Service, 0, len(keys))
	for _, k := range keys {
		s := f.services[k].svc
		s.Flags |= desired.FlagHashed // the kernel reports every service hashed
		out = append(out, &s)
	}
	return out, nil
}

func (f *IPVS) NewService(s *ipvs.Service) error {
	if err := f.begin("NewService", serviceName(s)); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// The kernel looks the service up before the scheduler: an existing
	// service is EEXIST whatever scheduler is asked for.
	k, fs, err := f.lookup(s)
	switch {
	case fs != nil:
		return syscall.EEXIST
	case err != syscall.ESRCH:
		return err
	case !slices.Contains(schedulers, s.SchedName):
		return syscall.ENOENT
	}
	if f.services == nil {
		f.services = make(map[desired.Key]*fakeService)
	}
	f.services[k] = &fakeService{svc: *s, dests: make(map[netip.AddrPort]*ipvs.Destination)}
	return nil
}

func (f *IPVS) UpdateService(s *ipvs.Service) error {
	return f.serviceOp("UpdateService", serviceName(s), s, func(_ desired.Key, fs *fakeService) error {
		if !slices.Contains(schedulers, s.SchedName) {
			return syscall.ENOENT
		}
		fs.svc.SchedName, fs.svc.Flags, fs.svc.Timeout = s.SchedName, s.Flags, s.Timeout
		return nil
	})
}

func (f *IPVS) DelService(s *ipvs.Service) error {
	return f.serviceOp("DelService", serviceName(s), s, func(k desired.Key, _ *fakeService) error {
		delete(f.services, k)
		return nil
	})
}

func (f *IPVS) Flush() error {
	if err := f.begin("Flush", ""); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.services = nil
	return nil
}

func (f *IPVS) GetDestinations(s *ipvs.Service) ([]*ipvs.Destination, error) {
	if err := f.begin("GetDestinations", serviceName(s)); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	_, fs, err := f.lookup(s)
	if err == syscall.ESRCH {
		// The kernel's dump of a missing service's destinations ends
		// empty, without an error.
		return []*ipvs.Destination{}, nil
	}
	if err != nil {
		return nil, err
	}
	keys := sortedAddrPorts(fs.dests)
	out := make([]*ipvs.Destination, 0, len(keys))
	for _, ap := range keys {
		d := *fs.dests[ap]
		out = append(out, &d)
	}
	return out, nil
}

// serviceOp counts and hooks op on target, then, under the lock, runs
// apply on the service s names, which must exist (ESRCH otherwise).
func (f *IPVS) serviceOp(op, target string, s *ipvs.Service, apply func(desired.Key, *fakeService) error) error {
	if err := f.begin(op, target); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	k, fs, err := f.lookup(s)
	if err != nil {
		return err
	}
	return apply(k, fs)
}

// destOp is serviceOp for an operation on destination d of service s.
func (f *IPVS) destOp(op string, s *ipvs.Service, d *ipvs.Destination, apply func(*fakeService, netip.AddrPort) error) error {
	ap, _ := destKey(d)
	return f.serviceOp(op, serviceName(s)+" -> "+ap.String(), s, func(_ desired.Key, fs *fakeService) error {
		ap, err := destKey(d)
		if err != nil {
			return err
		}
		return apply(fs, ap)
	})
}

func (f *IPVS) NewDestination(s *ipvs.Service, d *ipvs.Destination) error {
	return f.destOp("NewDestination", s, d, func(fs *fakeService, ap netip.AddrPort) error {
		if d.Weight < 0 {
			return syscall.ERANGE // checked before looking the destination up
		}
		if _, ok := fs.dests[ap]; ok {
			return syscall.EEXIST
		}
		c := *d
		fs.dests[ap] = &c
		return nil
	})
}

func (f *IPVS) UpdateDestination(s *ipvs.Service, d *ipvs.Destination) error {
	return f.destOp("UpdateDestination", s, d, func(fs *fakeService, ap netip.AddrPort) error {
		if d.Weight < 0 {
			return syscall.ERANGE
		}
		cur, ok := fs.dests[ap]
		if !ok {
			return syscall.ENOENT
		}
		cur.Weight, cur.ConnectionFlags = d.Weight, d.ConnectionFlags
		return nil
	})
}

func (f *IPVS) DelDestination(s *ipvs.Service, d *ipvs.Destination) error {
	return f.destOp("DelDestination", s, d, func(fs *fakeService, ap netip.AddrPort) error {
		if _, ok := fs.dests[ap]; !ok {
			return syscall.ENOENT
		}
		delete(fs.dests, ap)
		return nil
	})
}

// SetConnections sets a destination's connection counts, as traffic would.
func (f *IPVS) SetConnections(vs desired.Key, dest netip.AddrPort, active, inactive int) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.services[vs]
	if !ok {
		return fmt.Errorf("no service %s: %w", vs, syscall.ESRCH)
	}
	d, ok := fs.dests[dest]
	if !ok {
		return fmt.Errorf("no destination %s in %s: %w", dest, vs, syscall.ENOENT)
	}
	d.ActiveConnections, d.InactiveConnections = active, inactive
	return nil
}

// Add creates a service with destinations directly, without counting, to
// seed state a test starts from (another owner's services, leftovers).
func (f *IPVS) Add(vs desired.VirtualServer, rs ...desired.RealServer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.services == nil {
		f.services = make(map[desired.Key]*fakeService)
	}
	fs := &fakeService{svc: *handles.ToService(vs), dests: make(map[netip.AddrPort]*ipvs.Destination)}
	for _, r := range rs {
		fs.dests[r.AddrPort()] = handles.ToDestination(r)
	}
	f.services[vs.Key] = fs
}
