package fakeiptables

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"kproxy.dev/kproxy/redirect/kernel"
	"kproxy.dev/kproxy/sync/ipfamily"
)

// Fake is one IP family's iptables, in memory. It is safe for concurrent
// use. Use New.
type Fake struct {
	fam ipfamily.Family

	mu sync.Mutex
	// tables holds the tables that exist: like nf_tables, a table appears
	// when something first writes to it.
	tables   map[string]*table
	restores []Restore
	// failures are injected failures, used one per restore.
	failures []failure
}

// Restore is one restore the fake received.
type Restore struct {
	// Command is the command line: the binary and its flags.
	Command []string
	Payload string
	// ExitCode and Stderr are what the fake answered (0 and "" on success).
	ExitCode int
	Stderr   string
}

// New returns an empty iptables of family fam: no table exists until a
// restore or a rule command writes to it.
func New(fam ipfamily.Family) *Fake {
	return &Fake{fam: fam, tables: map[string]*table{}}
}

// Restores returns every restore received so far, failed ones included.
func (f *Fake) Restores() []Restore {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.restores)
}

// FailNextRestore makes the next restore not yet failed by an earlier call
// fail with stderr and exit code 1 without changing anything, as a kernel
// refusing a batch for reasons the fake does not model would. Calls queue.
func (f *Fake) FailNextRestore(stderr string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failures = append(f.failures, failure{stderr: stderr, code: 1})
}

// Run implements kernel.Runner for the restore and save commands of this
// family, either backend: "iptables-nft-restore", "ip6tables-legacy-save -t
// nat", ... A failed restore returns a *kernel.CommandError carrying the
// stderr and exit code iptables-nft-restore 1.8.9 would give.
func (f *Fake) Run(_ context.Context, stdin []byte, name string, args ...string) ([]byte, error) {
	cmdline := append([]string{name}, args...)
	base := filepath.Base(name)
	if fam := familyOfBinary(base); fam != f.fam {
		return nil, cmdErr(cmdline, -1, fmt.Sprintf("fakeiptables: the %s fake cannot run %s\n", f.fam, name))
	}
	switch {
	case strings.HasSuffix(base, "-restore"):
		noflush, fl := restoreFlags(base, args)
		if fl == nil {
			fl = f.restore(base, cmdline, stdin, noflush)
		}
		if fl != nil {
			return nil, cmdErr(cmdline, fl.code, fl.stderr)
		}
		return nil, nil
	case strings.HasSuffix(base, "-save"):
		tableName, err := saveTable(args)
		if err != "" {
			return nil, cmdErr(cmdline, 1, err)
		}
		return []byte(f.Save(tableName)), nil
	}
	return nil, cmdErr(cmdline, -1, "fakeiptables: unknown command "+name+"\n")
}

func familyOfBinary(binary string) ipfamily.Family {
	if strings.HasPrefix(binary, "ip6tables") {
		return ipfamily.IPv6
	}
	return ipfamily.IPv4
}

func cmdErr(cmdline []string, code int, stderr string) error {
	return &kernel.CommandError{Command: strings.Join(cmdline, " "), ExitCode: code, Stderr: stderr,
		Err: fmt.Errorf("exit status %d", code)}
}

// restoreFlags reads the restore flags kproxy and kube-proxy pass.
func restoreFlags(prog string, args []string) (noflush bool, fl *failure) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-n" || a == "--noflush":
			noflush = true
		case a == "-c" || a == "--counters":
		case a == "-w" || a == "--wait" || a == "-W" || a == "--wait-interval":
			// The value is optional for --wait and may follow as a word.
			if i+1 < len(args) && isNumber(args[i+1]) {
				i++
			}
		case strings.HasPrefix(a, "--wait=") || strings.HasPrefix(a, "--wait-interval="):
		default:
			return false, &failure{stderr: fmt.Sprintf("%s: unrecognized option '%s'\nTry `%s -h' for more information.\n", prog, a, prog), code: 1}
		}
	}
	return noflush, nil
}

func isNumber(s string) bool {
	return s != "" && strings.Trim(s, "0123456789") == ""
}

// saveTable reads "-t TABLE" (or --table); "" means every table.
func saveTable(args []string) (string, string) {
	name := ""
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case (a == "-t" || a == "--table") && i+1 < len(args):
			name = args[i+1]
			i++
		case strings.HasPrefix(a, "--table="):
			name = strings.TrimPrefix(a, "--table=")
		default:
			return "", fmt.Sprintf("fakeiptables: save option %q not modelled\n", a)
		}
	}
	if name != "" && builtinChains(name) == nil {
		return "", fmt.Sprintf("Table `%s' does not exist\n", name)
	}
	return name, ""
}

// table returns a table, existing or new (not yet stored).
func (f *Fake) table(name string) *table {
	if t, ok := f.tables[name]; ok {
		return t
	}
	return newTable(name)
}
