// Package app runs kproxy: it wires a source, the service map, a mode and the
// health and metrics servers together.
package app

import (
	"context"
	"errors"
)

// Config is replaced by options.Config once the options package exists.
type Config = any

// Run starts kproxy and returns when ctx is cancelled.
func Run(ctx context.Context, cfg Config) error { return errors.New("not wired yet") }

// Cleanup removes everything any mode may have installed.
func Cleanup(ctx context.Context, cfg Config) error { return errors.New("not wired yet") }
