// Package restore is the iptables plumbing every mode shares. A Runner writes
// one iptables-restore --noflush payload for a family and backend and reads
// tables back with iptables-save; when the tool refuses a payload, the
// failure comes back as an *Error naming the payload line responsible, for
// both backends' ways of reporting it. EnsureJumps keeps the few rules in
// built-in chains that enter a mode's own chains, through the go-iptables
// subset JumpRules.
//
// The package knows nothing about any mode's rules: modes render their own
// payloads and jump lists and hand them here.
package restore
