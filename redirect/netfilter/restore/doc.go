// Package restore is the iptables plumbing every mode shares, and the one
// place iptables text is written and read.
//
// Text: Payload builds an iptables-restore --noflush input (tables, chain
// declarations, rules, removals, COMMIT) and Chunks splits a large one into
// transactions of bounded size; Quote, QuoteTail, CommentMatch and JoinRule
// apply the one quoting rule (iptables-save's, stated in text.go);
// SplitRule splits a rule into words as iptables-restore does; ParseSave
// reads iptables-save output and FormatSave prints it; CanaryChain names
// the iptables mode's flush detector.
//
// Kernel: a Runner writes one payload for a family and backend and reads
// tables back with iptables-save; when the tool refuses a payload, the
// failure comes back as an *Error naming the payload line responsible, for
// both backends' ways of reporting it. Runner.EnsureJumps keeps the few
// rules in built-in chains that enter a mode's own chains.
//
// The package knows nothing about any mode's rules: modes build their own
// payloads and jump lists with it.
package restore
