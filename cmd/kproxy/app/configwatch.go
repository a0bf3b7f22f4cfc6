package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/fsnotify/fsnotify"
)

// ErrConfigFileChanged is returned once the --config file has been written
// or renamed: kproxy exits, as kube-proxy does, so that whatever restarts it
// (the DaemonSet's kubelet) applies the new configuration whole.
var ErrConfigFileChanged = errors.New("content of the proxy server's configuration file was updated")

// configWatch watches path (the --config file) from now on. Its run method
// returns ErrConfigFileChanged on a write or rename, nil when ctx ends.
type configWatch struct {
	path    string
	watcher *fsnotify.Watcher
}

// watchConfigFile starts watching path; a file that cannot be watched is an
// error, as in kube-proxy.
func watchConfigFile(path string) (*configWatch, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("watching the config file: %w", err)
	}
	if err := w.Add(path); err != nil {
		w.Close()
		return nil, fmt.Errorf("watching the config file %s: %w", path, err)
	}
	return &configWatch{path: path, watcher: w}, nil
}

func (c *configWatch) run(ctx context.Context) error {
	defer c.watcher.Close()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-c.watcher.Events:
			if !ok {
				return errors.New("config file watch closed")
			}
			if ev.Has(fsnotify.Write) || ev.Has(fsnotify.Rename) {
				return fmt.Errorf("%s: %w", c.path, ErrConfigFileChanged)
			}
		case err, ok := <-c.watcher.Errors:
			if !ok {
				return errors.New("config file watch closed")
			}
			return fmt.Errorf("watching the config file %s: %w", c.path, err)
		}
	}
}
