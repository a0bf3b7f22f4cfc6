package trace

import "fmt"

// ending is how a walk through a chain ends for one flow.
type ending uint8

const (
	// next: the rule did not end the chain (no target, MARK, or a jump
	// that came back); go on with the next rule.
	next ending = iota
	// returned: the chain ended (RETURN, its end, or a goto'd chain's end);
	// go on after the rule that jumped here, or apply the policy.
	returned
	accept
	drop
	reject
)

type branch struct {
	f   flow
	end ending
}

// walker walks one hook of one table.
type walker struct {
	t    *table
	hook string
	node Node
}

// walk runs chain from rule start for f, returning every way it ends.
func (w *walker) walk(chainName string, start int, f flow) ([]branch, error) {
	c := w.t.chains[chainName]
	for i := start; i < len(c.rules); i++ {
		r := c.rules[i]
		hit, miss, err := w.match(r, f)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.text, err)
		}
		var out []branch
		if hit != nil {
			ends, err := w.target(r, hit.matched(r.text))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", r.text, err)
			}
			for _, e := range ends {
				if e.end != next {
					out = append(out, e)
					continue
				}
				rest, err := w.walk(chainName, i+1, e.f)
				if err != nil {
					return nil, err
				}
				out = append(out, rest...)
			}
		}
		switch {
		case miss == nil:
			return out, nil
		case hit == nil:
			f = *miss
			continue
		}
		rest, err := w.walk(chainName, i+1, *miss)
		if err != nil {
			return nil, err
		}
		return append(out, rest...), nil
	}
	return []branch{{f: f, end: returned}}, nil
}

// jump runs the chain a rule jumps (or goes) to. A chain that returns sends
// a jump on to the next rule and a goto out of the calling chain too.
func (w *walker) jump(name string, isGoto bool, f flow) ([]branch, error) {
	ends, err := w.walk(name, 0, f)
	if err != nil {
		return nil, err
	}
	for i := range ends {
		if ends[i].end == returned && !isGoto {
			ends[i].end = next
		}
	}
	return ends, nil
}
