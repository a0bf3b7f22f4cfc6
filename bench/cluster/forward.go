package cluster

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
)

// Forward accepts connections on listen (in the caller's namespace) and
// relays each to target inside the network namespace at netnsPath, until
// ctx ends: the host's way to the API server in the router namespace.
func Forward(ctx context.Context, listen, netnsPath, target string) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", listen)
	if err != nil {
		return fmt.Errorf("listening on %s: %w", listen, err)
	}
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("accepting on %s: %w", listen, err)
		}
		go func() {
			defer conn.Close()
			up, err := DialIn(ctx, netnsPath, "tcp", target)
			if err != nil {
				slog.Warn("forwarding", "to", target, "err", err)
				return
			}
			defer up.Close()
			relay(conn, up)
		}()
	}
}

// relay copies both ways, passing on each side's end of stream.
func relay(a, b net.Conn) {
	var wg sync.WaitGroup
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
	}
	wg.Add(2)
	go pipe(a, b)
	go pipe(b, a)
	wg.Wait()
}
