package nftables

import (
	"context"
	"errors"

	"kproxy.dev/kproxy/sync/mode"
)

// build is written by the mode's implementation.
func build(ctx context.Context, s mode.Settings, d mode.Deps) (mode.Mode, error) {
	return nil, errors.New("the nftables mode is not implemented yet")
}
