// Package rulespec reads iptables rule text the way iptables-restore does:
// it splits a line into words (Split), renders words back the way
// iptables-save quotes them (Join), and parses a rule into its matches and
// target (Parse), checking them against the vocabulary kproxy's modes emit.
// fakeiptables uses it to refuse what the real tool refuses, and the packet
// tracer to evaluate rules.
package rulespec
