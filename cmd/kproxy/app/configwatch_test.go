package app

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestConfigWatch(t *testing.T) {
	tests := []struct {
		name    string
		change  func(path string) error
		wantErr error // nil: no change seen
	}{
		{"written", func(p string) error { return os.WriteFile(p, []byte("mode: iptables\n"), 0o600) }, ErrConfigFileChanged},
		{"renamed away", func(p string) error { return os.Rename(p, p+".old") }, ErrConfigFileChanged},
		{"only read", func(p string) error { _, err := os.ReadFile(p); return err }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "config.yaml")
			if err := os.WriteFile(path, []byte("mode: userspace\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			w, err := watchConfigFile(path)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- w.run(ctx) }()
			if err := tc.change(path); err != nil {
				t.Fatal(err)
			}
			if err := <-done; !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("run = %v, want %v", err, tc.wantErr)
			}
		})
	}
	if _, err := watchConfigFile(filepath.Join(t.TempDir(), "missing.yaml")); err == nil {
		t.Error("watching a missing file succeeded")
	}
}
