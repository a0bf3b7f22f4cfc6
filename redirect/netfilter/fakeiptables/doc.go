// Package fakeiptables is an in-memory iptables for one IP family that
// behaves like iptables 1.8.9 for everything kproxy's modes send it, and
// fails where and how the real tools fail, so unit tests catch what the
// kernel would refuse. A Fake implements kernel.Runner for the restore and
// save commands of its family (either backend's names), and offers the single
// rule commands an operator or another tool runs (Exists for -C, Insert,
// Append, Delete).
//
// Restores follow iptables-nft-restore:
//   - with --noflush, ":CHAIN - [0:0]" creates a chain or empties it, and
//     only the chains a payload names change; without it, every table the
//     payload names is emptied first (user chains deleted, built-in chains
//     flushed, policies kept);
//   - -N, -X, -F, -A, -I CHAIN [n], -D CHAIN rule, -D CHAIN n and -P do
//     what iptables does; -Z is ignored; counters are ignored;
//   - a rule jumping to a chain that does not exist at that point of the
//     payload fails, reported at the table's COMMIT line as nft reports it;
//     -X fails when a rule still jumps to the chain or it still has rules
//     ("CHAIN_DEL failed (Device or resource busy)"); targets the table
//     cannot load fail like the kernel's refusal; a missing COMMIT fails;
//   - each table section commits at its COMMIT: on a failure, the sections
//     committed before the failing one stay (both real tools do this), and
//     the failing one and those after it change nothing;
//   - stderr and exit codes follow iptables-nft-restore: 2 with "Error
//     occurred at line: N" for what its parser refuses, 1 with "line N
//     failed: reason." for a command it refuses, 4 with "line N: OP failed
//     (reason): ..." for what the kernel refuses, 1 with "COMMIT expected at
//     line N".
//
// Rules are parsed against the match and target vocabulary kproxy's modes
// emit (see package rulespec's Matches and targets); anything outside it
// fails, with a message saying the fake does not model it, rather than
// being stored unchecked.
//
// Rules are stored as written, since the modes write iptables-save's
// canonical text, with one normalisation: words are re-quoted the way
// iptables-save quotes them (restore.JoinRule). So `--comment "web"` is stored and saved
// as `--comment web`, and a -D, or Exists, finds a rule
// whichever quoting it was written with. Other rewrites of the real tool
// are not applied: "-s 10.0.0.1" stays as written (iptables-save prints
// "-s 10.0.0.1/32"), and so do an implicit "-m tcp", the probability's
// digits, MARK's --or-mark/--xor-mark forms (saved as --set-xmark) and a
// REJECT without --reject-with.
//
// The fake also records every restore it receives (Restores) and can be
// told to fail the next ones (FailNextRestore).
package fakeiptables
