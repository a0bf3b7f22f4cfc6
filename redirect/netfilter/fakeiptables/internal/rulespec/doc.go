// Package rulespec parses a rule's words (split by restore.SplitRule) into
// its matches and target (Parse), checking them against the vocabulary
// kproxy's modes emit.
// fakeiptables uses it to refuse what the real tool refuses, and the packet
// tracer to evaluate rules.
package rulespec
