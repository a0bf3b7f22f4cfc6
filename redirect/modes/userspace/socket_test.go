package userspace

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"
)

// TestDropAllFilter: a listener with the drop-all filter leaves connection
// attempts unanswered (the client times out, as behind a DROP rule), and
// serves again once the filter is detached.
func TestDropAllFilter(t *testing.T) {
	l, err := localPortalListenConfig().Listen(context.Background(), "tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ln := l.(*net.TCPListener)
	raw, err := ln.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	dial := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp4", ln.Addr().String())
		if err == nil {
			c.Close()
		}
		return err
	}
	for _, step := range []struct {
		drop     bool
		wantDrop bool
	}{{drop: true, wantDrop: true}, {drop: true, wantDrop: true}, {drop: false}, {drop: false}} {
		if err := setDropAll(raw, step.drop); err != nil {
			t.Fatalf("setDropAll(%t): %v", step.drop, err)
		}
		err := dial()
		var ne net.Error
		if dropped := errors.As(err, &ne) && ne.Timeout(); dropped != step.wantDrop {
			t.Fatalf("with the filter %t: dial error %v, want dropped=%t", step.drop, err, step.wantDrop)
		}
	}
}
