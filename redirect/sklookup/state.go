package sklookup

import (
	"fmt"
	"net/netip"
)

// kernelState is what the two hash maps hold. Each entry remembers the
// comparison pass that last saw it in the input, so a Sync finds removals
// without building a second copy of a large input.
type kernelState struct {
	targets map[mapKey]*entry // value: Action
	guarded map[mapKey]*entry // value: 1
	pass    uint64
}

type entry struct {
	value uint32
	seen  uint64 // the last pass whose input held this key
}

func newKernelState() kernelState {
	return kernelState{targets: map[mapKey]*entry{}, guarded: map[mapKey]*entry{}}
}

// changes are the writes that turn a kernelState into the input of a Sync.
type changes struct {
	setTargetKeys          []mapKey
	setTargetValues        []uint32
	delTargets             []mapKey
	addGuarded, delGuarded []mapKey
}

// compare validates the input and lists the writes it needs. It changes
// nothing but the entries' pass marks.
func (k *kernelState) compare(targets map[Target]Action, guarded []netip.Addr) (changes, error) {
	if len(targets) > MaxTargets {
		return changes{}, fmt.Errorf("%d targets, at most %d fit", len(targets), MaxTargets)
	}
	k.pass++
	var c changes
	matched := 0
	for t, a := range targets {
		if a != Steer && a != Drop && a != Discard && a != ServeNode {
			return changes{}, fmt.Errorf("target %s: unknown %s", t, a)
		}
		key, err := targetKey(t)
		if err != nil {
			return changes{}, err
		}
		e := k.targets[key]
		if e != nil {
			e.seen = k.pass
			matched++
		}
		if e == nil || e.value != uint32(a) {
			c.setTargetKeys = append(c.setTargetKeys, key)
			c.setTargetValues = append(c.setTargetValues, uint32(a))
		}
	}
	if matched < len(k.targets) {
		for key, e := range k.targets {
			if e.seen != k.pass {
				c.delTargets = append(c.delTargets, key)
			}
		}
	}

	// The guarded list may name an address twice.
	var adding map[mapKey]bool
	matched = 0
	for _, a := range guarded {
		key, err := guardedKey(a)
		if err != nil {
			return changes{}, err
		}
		if e := k.guarded[key]; e != nil {
			if e.seen != k.pass {
				e.seen = k.pass
				matched++
			}
			continue
		}
		if adding == nil {
			adding = map[mapKey]bool{}
		}
		if !adding[key] {
			adding[key] = true
			c.addGuarded = append(c.addGuarded, key)
		}
	}
	if matched < len(k.guarded) {
		for key, e := range k.guarded {
			if e.seen != k.pass {
				c.delGuarded = append(c.delGuarded, key)
			}
		}
	}
	if n := len(k.guarded) + len(c.addGuarded) - len(c.delGuarded); n > MaxGuarded {
		return changes{}, fmt.Errorf("%d guarded addresses, at most %d fit", n, MaxGuarded)
	}
	return c, nil
}

// diff validates a change given as such and lists the writes it needs:
// entries already as asked are left out.
func (k *kernelState) diff(set map[Target]Action, del []Target, addGuarded, delGuarded []netip.Addr) (changes, error) {
	var c changes
	setKeys := make(map[mapKey]bool, len(set))
	for t, a := range set {
		if a != Steer && a != Drop && a != Discard && a != ServeNode {
			return changes{}, fmt.Errorf("target %s: unknown %s", t, a)
		}
		key, err := targetKey(t)
		if err != nil {
			return changes{}, err
		}
		setKeys[key] = true
		if e := k.targets[key]; e == nil || e.value != uint32(a) {
			c.setTargetKeys = append(c.setTargetKeys, key)
			c.setTargetValues = append(c.setTargetValues, uint32(a))
		}
	}
	added := 0
	for _, key := range c.setTargetKeys {
		if k.targets[key] == nil {
			added++
		}
	}
	deleting := map[mapKey]bool{}
	for _, t := range del {
		key, err := targetKey(t)
		if err != nil {
			return changes{}, err
		}
		if k.targets[key] != nil && !setKeys[key] && !deleting[key] {
			deleting[key] = true
			c.delTargets = append(c.delTargets, key)
		}
	}
	if n := len(k.targets) + added - len(c.delTargets); n > MaxTargets {
		return changes{}, fmt.Errorf("%d targets, at most %d fit", n, MaxTargets)
	}
	adding := map[mapKey]bool{}
	for _, a := range addGuarded {
		key, err := guardedKey(a)
		if err != nil {
			return changes{}, err
		}
		if !adding[key] && k.guarded[key] == nil {
			c.addGuarded = append(c.addGuarded, key)
		}
		adding[key] = true
	}
	deleting = map[mapKey]bool{}
	for _, a := range delGuarded {
		key, err := guardedKey(a)
		if err != nil {
			return changes{}, err
		}
		if k.guarded[key] != nil && !adding[key] && !deleting[key] {
			deleting[key] = true
			c.delGuarded = append(c.delGuarded, key)
		}
	}
	if n := len(k.guarded) + len(c.addGuarded) - len(c.delGuarded); n > MaxGuarded {
		return changes{}, fmt.Errorf("%d guarded addresses, at most %d fit", n, MaxGuarded)
	}
	return c, nil
}

// apply records that the kernel now holds what compare's input asked for.
func (k *kernelState) apply(c changes) {
	for i, key := range c.setTargetKeys {
		if e := k.targets[key]; e != nil {
			e.value = c.setTargetValues[i]
		} else {
			k.targets[key] = &entry{value: c.setTargetValues[i], seen: k.pass}
		}
	}
	for _, key := range c.delTargets {
		delete(k.targets, key)
	}
	for _, key := range c.addGuarded {
		k.guarded[key] = &entry{value: 1, seen: k.pass}
	}
	for _, key := range c.delGuarded {
		delete(k.guarded, key)
	}
}

func guardedValues(n int) []uint8 {
	v := make([]uint8, n)
	for i := range v {
		v[i] = 1
	}
	return v
}
