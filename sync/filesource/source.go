// Package filesource feeds a service map from manifest files instead of a
// cluster: `kproxy --services-file PATH`. PATH is one YAML/JSON file or a
// directory of them holding Service, EndpointSlice and Node objects. The
// source validates them as the API server would, keeps the last good version
// of anything that turns invalid, and hands the sink only what changed.
package filesource

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"kproxy.dev/kproxy/sync/servicemap"
)

const (
	// DefaultDebounce lets an editor finish a save (write, rename, chmod)
	// before the files are read.
	DefaultDebounce = 100 * time.Millisecond
	// DefaultResyncPeriod re-reads everything even without events, in case
	// a change was missed (network filesystems, a lost watch).
	DefaultResyncPeriod = 30 * time.Second
	// maxFileSize bounds what one manifest may make kproxy hold in memory.
	maxFileSize = 32 << 20
)

// ReloadResult describes one completed (re)load.
type ReloadResult struct {
	// Generation counts reloads, starting at 1 for the initial load.
	Generation uint64
	// Updated and Deleted count the objects handed to the sink.
	Updated, Deleted int
	// Errors lists every rejected file and document (empty when all is well).
	Errors []error
}

// Option tunes a Source.
type Option func(*Source)

// WithDebounce sets how long the source waits after a file event before
// reading, so that one save is one reload.
func WithDebounce(d time.Duration) Option { return func(s *Source) { s.debounce = d } }

// WithResyncPeriod sets the safety-net re-read interval; 0 disables it.
func WithResyncPeriod(d time.Duration) Option { return func(s *Source) { s.resync = d } }

// WithReloadHook has fn called, on the Run goroutine, after every reload
// once the sink has seen its changes (and, for the first, OnSynced). Tests
// use it to wait for a reload.
func WithReloadHook(fn func(ReloadResult)) Option { return func(s *Source) { s.onReload = fn } }

// Source reads the services file(s) and keeps a Sink in step with them.
type Source struct {
	root     string
	rootDir  bool
	nodeName string
	sink     servicemap.Sink
	metrics  *metrics
	decoder  *decoder
	debounce time.Duration
	resync   time.Duration
	onReload func(ReloadResult)
	running  atomic.Bool

	// current is the state the sink has seen and decoded the last decoded
	// content of each file (re-reading an unchanged file skips decoding);
	// only the goroutine running reloads uses them.
	current              state
	decoded, nextDecoded map[string]decodedFile

	mu         sync.Mutex
	errs       []error
	generation uint64
}

// New returns a Source for path, a manifest file or a directory of them,
// that feeds sink and registers its metrics on reg (nil: not registered).
// Only the Node named nodeName reaches the sink.
func New(path, nodeName string, sink servicemap.Sink, reg prometheus.Registerer, opts ...Option) (*Source, error) {
	if sink == nil {
		return nil, fmt.Errorf("services file source for %s: no sink", path)
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("services file: %w", err)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Source{
		root:     filepath.Clean(path),
		rootDir:  info.IsDir(),
		nodeName: nodeName,
		sink:     sink,
		metrics:  m,
		decoder:  newDecoder(),
		debounce: DefaultDebounce,
		resync:   DefaultResyncPeriod,
		current:  state{},
		decoded:  map[string]decodedFile{},
	}
	for _, o := range opts {
		o(s)
	}
	return s, nil
}

// Errors returns the problems found by the latest reload: one error per
// rejected document or unreadable file. The command logs them.
func (s *Source) Errors() []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs)
}

// Generation is the number of reloads completed so far.
func (s *Source) Generation() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.generation
}

// Run loads the files, hands everything to the sink, calls its OnSynced,
// then follows changes until ctx is cancelled. A file watch that cannot be
// set up is logged and the periodic re-read carries on alone.
func (s *Source) Run(ctx context.Context) error {
	if s.running.Swap(true) {
		return fmt.Errorf("services file source for %s is already running", s.root)
	}
	logger := klog.FromContext(ctx).WithValues("servicesFile", s.root)

	// Watch before the first read so no change slips in between.
	w := newWatch(s.root, s.rootDir, logger)
	defer w.close()

	first := s.reload(logger)
	s.sink.OnSynced()
	s.reloaded(first)

	var tick <-chan time.Time
	if s.resync > 0 {
		ticker := time.NewTicker(s.resync)
		defer ticker.Stop()
		tick = ticker.C
	}
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	defer debounce.Stop()

	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-w.events():
			if !ok {
				w.lost()
				continue
			}
			if w.relevant(ev) {
				debounce.Reset(s.debounce)
			}
		case err, ok := <-w.errors():
			if !ok {
				w.lost()
				continue
			}
			logger.Error(err, "Watching the services file; the periodic re-read still applies")
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				debounce.Reset(s.debounce) // events were lost: read everything
			}
		case <-debounce.C:
			s.reloaded(s.reload(logger))
		case <-tick:
			if w.ensure() {
				logger.Info("Watching the services file again")
			}
			s.reloaded(s.reload(logger))
		}
	}
}

// reload reads everything, reconciles it with what is in force, updates the
// sink, the errors and the metrics.
func (s *Source) reload(logger klog.Logger) ReloadResult {
	reads, rootErr := s.readAll()
	var res reconcileResult
	if rootErr != nil {
		// The path itself is gone or unreadable: keep everything, since
		// that is more often a save in progress than a wish to drop all
		// services. An empty file or directory drops them.
		res = reconcileResult{next: s.current, errs: []error{&FileError{File: s.root, Err: rootErr}}}
	} else {
		res = reconcile(s.current, reads)
	}
	counts := applyDiff(s.sink, s.nodeName, s.current, res.next)
	s.current = res.next

	s.metrics.rejected.Add(float64(res.rejected))
	s.metrics.invalid.Set(float64(res.rejected))
	result := "success"
	if len(res.errs) > 0 {
		result = "error"
	}
	s.metrics.reloads.WithLabelValues(result).Inc()

	s.mu.Lock()
	s.generation++
	gen := s.generation
	sameErrs := slices.EqualFunc(s.errs, res.errs, func(a, b error) bool { return a.Error() == b.Error() })
	s.errs = res.errs
	s.mu.Unlock()

	if !sameErrs || counts.updated > 0 || counts.deleted > 0 {
		logger.Info("Services file read", "generation", gen, "objects", len(res.next),
			"updated", counts.updated, "deleted", counts.deleted, "errors", len(res.errs))
	}
	// Periodic re-reads find the same problems again: log them when they change.
	if !sameErrs {
		for _, err := range res.errs {
			logger.Error(err, "Services file content rejected; its last good version stays in force")
		}
	}
	return ReloadResult{Generation: gen, Updated: counts.updated, Deleted: counts.deleted, Errors: slices.Clone(res.errs)}
}

func (s *Source) reloaded(r ReloadResult) {
	if s.onReload != nil {
		s.onReload(r)
	}
}

// readAll reads and decodes every manifest. A non-nil error means the root
// path itself could not be read.
func (s *Source) readAll() ([]fileRead, error) {
	// Only files read this time stay cached.
	s.nextDecoded = map[string]decodedFile{}
	defer func() { s.decoded, s.nextDecoded = s.nextDecoded, nil }()
	if !s.rootDir {
		r, gone := s.readFile(s.root, s.root)
		if gone {
			return nil, fmt.Errorf("no longer exists")
		}
		return []fileRead{r}, nil
	}
	entries, err := os.ReadDir(s.root)
	if err != nil {
		return nil, fmt.Errorf("reading directory: %w", err)
	}
	var reads []fileRead
	for _, e := range entries {
		if !isManifestName(e.Name()) || e.IsDir() {
			continue
		}
		r, gone := s.readFile(filepath.Join(s.root, e.Name()), e.Name())
		if !gone {
			reads = append(reads, r)
		}
	}
	return reads, nil
}

// readFile reads one manifest; gone says it vanished (a deletion, not an error).
func (s *Source) readFile(path, name string) (r fileRead, gone bool) {
	r.name = name
	data, err := readLimited(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return r, true
	case err != nil:
		r.err = err
		return r, false
	}
	if prev, ok := s.decoded[name]; ok && bytes.Equal(prev.data, data) {
		r.docs = slices.Clone(prev.docs) // reconcile marks duplicates in place
	} else {
		r.docs = s.decoder.decodeFile(name, data, strings.EqualFold(filepath.Ext(name), ".json"))
	}
	s.nextDecoded[name] = decodedFile{data: data, docs: slices.Clone(r.docs)}
	return r, false
}

// decodedFile is a file's content and what it decoded to.
type decodedFile struct {
	data []byte
	docs []document
}

func readLimited(path string) ([]byte, error) {
	// Stat before opening: opening a FIFO would block the source.
	info, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("cannot read: %w", err)
	case !info.Mode().IsRegular():
		return nil, fmt.Errorf("cannot read: not a regular file")
	}
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, err
		}
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("cannot read: larger than %d MiB", maxFileSize>>20)
	}
	return data, nil
}

// isManifestName says a directory entry is a manifest: a YAML or JSON file
// that is not hidden (editor swap files, Kubernetes' ..data links).
func isManifestName(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// watch follows the directory holding the manifests. Editors save by
// writing a new file and renaming it over the old one, which replaces the
// inode, so the directory is watched rather than the files.
type watch struct {
	root    string
	rootDir bool
	dir     string
	logger  klog.Logger
	w       *fsnotify.Watcher
	active  bool
}

func newWatch(root string, rootDir bool, logger klog.Logger) *watch {
	w := &watch{root: root, rootDir: rootDir, dir: root, logger: logger}
	if !rootDir {
		w.dir = filepath.Dir(root)
	}
	w.ensure()
	return w
}

// ensure (re)creates the watcher and (re)adds the directory watch if they
// are not active, and says whether it just did.
func (w *watch) ensure() bool {
	if w.active {
		return false
	}
	if w.w == nil {
		fw, err := fsnotify.NewWatcher()
		if err != nil {
			w.logger.Error(err, "Cannot watch the services file; relying on the periodic re-read")
			return false
		}
		w.w = fw
	}
	if err := w.w.Add(w.dir); err != nil {
		w.logger.Error(err, "Cannot watch the services file directory; relying on the periodic re-read", "dir", w.dir)
		return false
	}
	w.active = true
	return true
}

func (w *watch) lost() {
	w.active = false
	if w.w != nil {
		w.w.Close()
		w.w = nil
	}
}

func (w *watch) close() {
	if w.w != nil {
		w.w.Close()
	}
}

// events and errors are nil (blocking forever) without a watcher.
func (w *watch) events() <-chan fsnotify.Event {
	if w.w == nil {
		return nil
	}
	return w.w.Events
}

func (w *watch) errors() <-chan error {
	if w.w == nil {
		return nil
	}
	return w.w.Errors
}

// relevant says an event may change what is read. The watched directory
// itself going away ends its watch until the next periodic re-read.
func (w *watch) relevant(ev fsnotify.Event) bool {
	name := filepath.Clean(ev.Name)
	if name == w.dir {
		if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
			w.active = false
			_ = w.w.Remove(w.dir) // may already be gone with the directory
		}
		return true
	}
	base := filepath.Base(name)
	// Kubernetes volumes swap a hidden ..data symlink to update files.
	if strings.HasPrefix(base, "..") {
		return true
	}
	if w.rootDir {
		return isManifestName(base)
	}
	return name == w.root
}
