package programs

import (
	"path"
	"strings"
)

// launchers are programs that run other programs named in their arguments:
// each returns the programs its (constant) arguments launch.
var launchers = map[string]func(args []string) []string{
	"unshare": func(args []string) []string { return first(skipFlags(args)) },
	"nsenter": func(args []string) []string { return first(skipFlags(args)) },
	"timeout": func(args []string) []string {
		rest := skipFlags(args)
		if len(rest) > 0 { // the duration
			rest = rest[1:]
		}
		return first(rest)
	},
	"env": func(args []string) []string {
		rest := skipFlags(args)
		for len(rest) > 0 && strings.Contains(rest[0], "=") {
			rest = rest[1:]
		}
		return first(rest)
	},
	"ip": func(args []string) []string {
		// ip [-n NS] netns exec NS PROGRAM ...
		for i := 0; i+3 < len(args); i++ {
			if args[i] == "netns" && args[i+1] == "exec" {
				return first(args[i+3:])
			}
		}
		return nil
	},
	"sh":   shellPrograms,
	"bash": shellPrograms,
}

func skipFlags(args []string) []string {
	for len(args) > 0 && strings.HasPrefix(args[0], "-") {
		args = args[1:]
	}
	return args
}

// first is the program args start with, if any.
func first(args []string) []string {
	if len(args) == 0 {
		return nil
	}
	return []string{path.Base(args[0])}
}

// shellBuiltins are words a `sh -c` script runs without a program.
var shellBuiltins = map[string]bool{
	"echo": true, "exit": true, "wait": true, "cd": true, "set": true, "export": true, "exec": true,
	"true": true, "false": true, "test": true, "[": true, "read": true, "printf": true, "trap": true,
	"kill": true, ":": true, "if": true, "then": true, "else": true, "fi": true,
	"for": true, "do": true, "done": true, "while": true,
}

// shellPrograms returns the first word of each simple command of a
// `sh -c SCRIPT` script, builtins left out: enough for the one-liners tests
// write, not a shell parser.
func shellPrograms(args []string) []string {
	if len(args) < 2 || args[0] != "-c" {
		return nil
	}
	var words []string
	for _, cmd := range strings.FieldsFunc(args[1], func(r rune) bool { return strings.ContainsRune(";&|\n()", r) }) {
		f := strings.Fields(cmd)
		for len(f) > 0 && strings.Contains(f[0], "=") { // VAR=value cmd
			f = f[1:]
		}
		if len(f) == 0 || shellBuiltins[f[0]] || strings.ContainsAny(f[0], `"'$`) {
			continue
		}
		words = append(words, path.Base(f[0]))
	}
	return words
}
