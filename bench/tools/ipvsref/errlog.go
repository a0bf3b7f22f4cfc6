package main

import (
	"fmt"
	"strings"
	"sync"

	"github.com/go-logr/logr"
)

// errorLog collects the errors the proxier logs. Its sync reports most
// failures (a virtual server it could not add, an ipset entry it could not
// write) only in the log and carries on, so the log is how this program
// knows the sync did not do everything it meant to.
type errorLog struct {
	mu     sync.Mutex
	errors []string
}

func (l *errorLog) record(err error, msg string, kv []any) {
	var b strings.Builder
	b.WriteString(msg)
	if err != nil {
		fmt.Fprintf(&b, ": %v", err)
	}
	for i := 0; i+1 < len(kv); i += 2 {
		fmt.Fprintf(&b, " %v=%v", kv[i], kv[i+1])
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, b.String())
}

// Errors returns what was logged at error level, oldest first.
func (l *errorLog) Errors() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.errors...)
}

// recordingSink passes every call on to its sink and records errors.
type recordingSink struct {
	logr.LogSink
	log    *errorLog
	values []any // from WithValues, recorded with each error
}

func newRecordingLogger(base logr.Logger, log *errorLog) logr.Logger {
	return logr.New(&recordingSink{LogSink: base.GetSink(), log: log})
}

func (s *recordingSink) Error(err error, msg string, kv ...any) {
	s.log.record(err, msg, append(append([]any(nil), s.values...), kv...))
	s.LogSink.Error(err, msg, kv...)
}

func (s *recordingSink) WithValues(kv ...any) logr.LogSink {
	return &recordingSink{LogSink: s.LogSink.WithValues(kv...), log: s.log, values: append(append([]any(nil), s.values...), kv...)}
}

func (s *recordingSink) WithName(name string) logr.LogSink {
	return &recordingSink{LogSink: s.LogSink.WithName(name), log: s.log, values: s.values}
}

// WithCallDepth keeps file:line pointing at the caller, not at this sink.
func (s *recordingSink) WithCallDepth(depth int) logr.LogSink {
	inner, ok := s.LogSink.(logr.CallDepthLogSink)
	if !ok {
		return s
	}
	return &recordingSink{LogSink: inner.WithCallDepth(depth), log: s.log, values: s.values}
}
