package fakeiptables

import (
	"fmt"

	"kproxy.dev/kproxy/redirect/netfilter/restore"
)

// restore applies one restore payload and records it. Each table section
// commits at its COMMIT, as with both real tools: when a section fails,
// the sections committed before it stay, and it and the ones after it
// change nothing.
func (f *Fake) restore(prog string, cmdline []string, payload []byte, noflush bool) *failure {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.injected()
	if fl == nil {
		fl = f.apply(prog, string(payload), noflush)
	}
	rec := Restore{Command: cmdline, Payload: string(payload)}
	if fl != nil {
		rec.ExitCode, rec.Stderr = fl.code, fl.stderr
	}
	f.restores = append(f.restores, rec)
	return fl
}

func (f *Fake) injected() *failure {
	if len(f.failures) == 0 {
		return nil
	}
	fl := f.failures[0]
	f.failures = f.failures[1:]
	return &fl
}

func (f *Fake) apply(prog, payload string, noflush bool) *failure {
	var (
		x    *txn
		name string
		last int
	)
	for l := range restore.Lines(payload) {
		n, line := l.N, l.Text
		last = n
		switch {
		case l.Kind == restore.BlankLine:
		case l.Kind == restore.TableLine:
			if x != nil {
				return parseFailure(prog, n, fmt.Sprintf("Bad argument `%s'", line), true)
			}
			name = line[1:]
			if builtinChains(name) == nil {
				return parseFailure(prog, n, fmt.Sprintf("%s: line %d table name '%s' invalid", prog, n, name), false)
			}
			x = newTxn(f.fam, f.table(name).fork())
			if !noflush {
				x.work.flushAll()
			}
		case l.Kind == restore.CommitLine:
			if x == nil {
				return commandFailure(prog, n, "")
			}
			if fl := x.finish(prog, n); fl != nil {
				return fl
			}
			f.tables[name] = x.work
			x = nil
		case x == nil:
			return commandFailure(prog, n, "")
		case l.Kind == restore.ChainLine:
			if se := x.declare(line, n); se != nil {
				return parseFailure(prog, n, se.Msg, se.Bare)
			}
		default:
			words, err := restore.SplitRule(line)
			if err != nil {
				return parseFailure(prog, n, err.Error(), false)
			}
			if se := x.command(words, n); se != nil {
				return parseFailure(prog, n, se.Msg, se.Bare)
			}
		}
	}
	if x != nil {
		return commitExpected(prog, last+1)
	}
	return nil
}
