// Package filesource feeds a service map from manifest files instead of a
// cluster: `kproxy --services-file PATH`. PATH is one YAML/JSON file or a
// directory of them holding Service, EndpointSlice and Node objects. The
// source validates them as the API server would, keeps the last good version
// of anything that turns invalid, and hands the sink only what changed.
//
// "Last good" is decided per document when the document can be parsed and
// per file when it cannot: an empty file (nothing but whitespace, what a
// truncating save leaves), an unreadable one, or one holding a document that
// cannot be parsed (its boundaries with its neighbours may be lost) keeps
// every object of the file's last good version that no valid document now
// defines. A file holding only comments empties it on purpose. A save in
// progress (the file still open for writing, or modified within the
// debounce) is waited for before it is read.
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
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"
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
	// maxFileSize bounds what one manifest may make kproxy hold in memory,
	// and maxTotalSize what all the files of a directory may.
	maxFileSize  = 32 << 20
	maxTotalSize = 64 << 20
	// maxDirEntries bounds the entries of a services directory read at all.
	maxDirEntries = 10000
	// settleRounds bounds, in debounce periods, how long a reload waits for
	// a save in progress: a writer holding the file open for good must not
	// stop every update (and an empty read is never applied anyway).
	settleRounds = 50
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

// heldForSave says a file was held because a save was in progress while it
// was read: it is read again once the save has ended, not at the next
// resync.
func (r ReloadResult) heldForSave() bool {
	return slices.ContainsFunc(r.Errors, func(err error) bool { return errors.Is(err, errSaveInProgress) })
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

	// Even the first read waits for a save in progress: applying half a
	// file at start-up would drop the services of the other half.
	for range settleRounds {
		if s.settled() || ctx.Err() != nil {
			break
		}
		time.Sleep(s.debounce)
	}
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
	if first.heldForSave() {
		debounce.Reset(s.debounce)
	}
	// unsettled counts the debounce periods a save in progress has delayed
	// the pending reload.
	unsettled := 0
	reloadSettled := func() {
		if unsettled < settleRounds && !s.settled() {
			if unsettled == 0 {
				logger.V(2).Info("Services file is being written; waiting for the save to finish")
			}
			unsettled++
			debounce.Reset(s.debounce)
			return
		}
		unsettled = 0
		r := s.reload(logger)
		s.reloaded(r)
		if r.heldForSave() {
			debounce.Reset(s.debounce)
		}
	}

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
			reloadSettled()
		case <-tick:
			if w.ensure() {
				logger.Info("Watching the services file again")
			}
			reloadSettled()
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
		// services. An empty directory drops them.
		res = reconcileResult{next: s.current, errs: []error{&FileError{File: s.root, Err: rootErr}}, heldFiles: 1, kept: len(s.current)}
	} else {
		res = reconcile(s.current, reads)
	}
	counts := applyDiff(s.sink, s.nodeName, s.current, res.next)
	s.current = res.next

	s.metrics.rejected.Add(float64(res.rejected))
	s.metrics.invalid.Set(float64(res.rejected))
	s.metrics.rejectedFiles.Add(float64(res.heldFiles))
	s.metrics.heldFiles.Set(float64(res.heldFiles))
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
		// kept counts the objects in force only as a last good version:
		// what the rejections below left in place.
		logger.Info("Services file read", "generation", gen, "objects", len(res.next),
			"updated", counts.updated, "deleted", counts.deleted, "errors", len(res.errs), "keptFromLastGood", res.kept)
	}
	// Periodic re-reads find the same problems again: log them when they change.
	if !sameErrs {
		for _, err := range res.errs {
			logger.Error(err, rejectionMessage(err))
		}
	}
	return ReloadResult{Generation: gen, Updated: counts.updated, Deleted: counts.deleted, Errors: slices.Clone(res.errs)}
}

// rejectionMessage says what a rejection leaves in force, as reconcile does.
func rejectionMessage(err error) string {
	var docErr *DocumentError
	switch {
	case errors.As(err, &docErr) && docErr.Unparsed:
		return "Services file document cannot be parsed, so its boundaries are unknown: every object of the file's last good version that no valid document defines stays in force"
	case errors.As(err, &docErr):
		return "Services file document rejected; the last good version of its object, if any, stays in force"
	default:
		return "Services file rejected as a whole; its last good version stays in force"
	}
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
		r, gone := s.readFile(s.root, s.root, maxFileSize)
		if gone {
			return nil, fmt.Errorf("no longer exists")
		}
		return []fileRead{r}, nil
	}
	names, err := manifestNames(s.root)
	if err != nil {
		return nil, err
	}
	var reads []fileRead
	budget := int64(maxTotalSize)
	for _, name := range names {
		if budget <= 0 {
			// Past the budget the files are not read: they keep their
			// last good version.
			reads = append(reads, fileRead{name: name, err: fmt.Errorf("not read: the directory's manifests exceed %d MiB in all", maxTotalSize>>20)})
			continue
		}
		r, gone := s.readFile(filepath.Join(s.root, name), name, min(budget, maxFileSize))
		if !gone {
			budget -= r.size
			reads = append(reads, r)
		}
	}
	return reads, nil
}

// manifestNames lists the manifests of directory dir, sorted. The directory
// is opened without blocking (it may have been replaced by a FIFO) and at
// most maxDirEntries entries are read.
func manifestNames(dir string) ([]string, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("reading directory: %w", err)
	}
	defer f.Close()
	entries, err := f.ReadDir(maxDirEntries + 1)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading directory: %w", err)
	}
	if len(entries) > maxDirEntries {
		return nil, fmt.Errorf("reading directory: more than %d entries", maxDirEntries)
	}
	var names []string
	for _, e := range entries {
		if isManifestName(e.Name()) && !e.IsDir() {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

// readFile reads one manifest of at most limit bytes; gone says it vanished
// (a deletion, not an error).
func (s *Source) readFile(path, name string, limit int64) (r fileRead, gone bool) {
	r.name = name
	data, err := readLimited(path, limit)
	r.size = int64(len(data))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return r, true
	case err != nil:
		r.err = err
		return r, false
	}
	if prev, ok := s.decoded[name]; ok && bytes.Equal(prev.data, data) {
		r.err, r.docs = prev.err, slices.Clone(prev.docs) // reconcile marks late rejections in place
	} else {
		d := s.decoder.decodeContent(name, data)
		r.err, r.docs = d.err, d.docs
	}
	s.nextDecoded[name] = decodedFile{data: data, err: r.err, docs: slices.Clone(r.docs)}
	return r, false
}

// decodeContent decodes the content of the file name. An empty file (what a
// truncating save leaves until it writes) is an error, never applied; a file
// holding a comment empties it on purpose.
func (d *decoder) decodeContent(name string, data []byte) fileRead {
	if len(bytes.TrimSpace(data)) == 0 {
		return fileRead{name: name, err: errEmpty, size: int64(len(data))}
	}
	return fileRead{name: name, docs: d.decodeFile(name, data, strings.EqualFold(filepath.Ext(name), ".json")), size: int64(len(data))}
}

var errEmpty = errors.New("is empty, as a save in progress leaves it; its last good version stays in force (a file holding only a comment removes every object on purpose)")

// decodedFile is a file's content and what it decoded to.
type decodedFile struct {
	data []byte
	err  error
	docs []document
}

// openRegular opens path for reading without blocking and refuses anything
// but a regular file. The type is checked on the open descriptor: checking
// the path first and opening it then leaves a window in which a FIFO put in
// its place would block the source in open(2).
func openRegular(path string) (*os.File, os.FileInfo, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, err
		}
		return nil, nil, fmt.Errorf("cannot read: %w", err)
	}
	info, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("cannot read: %w", err)
	}
	if !info.Mode().IsRegular() {
		f.Close()
		return nil, nil, fmt.Errorf("cannot read: not a regular file but %s", typeName(info.Mode()))
	}
	return f, info, nil
}

func typeName(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsDir():
		return "a directory"
	default:
		return "of mode " + m.Type().String()
	}
}

// readLimited reads a regular file of at most limit bytes whole. A save in
// progress must not be read halfway: the part before a truncation is
// valid YAML often enough (a slice cut after "endpoints:" has none). So
// the file is read under a read lease, which makes any open for writing
// wait until it is released, and a file some process holds open for
// writing is not read at all (errSaveInProgress). Where leases cannot be
// taken, a read during which the file's size or modification time moved
// is refused the same way.
func readLimited(path string, limit int64) ([]byte, error) {
	f, before, err := openRegular(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	switch lease := takeReadLease(f); lease {
	case leaseBusy:
		return nil, errSaveInProgress
	case leaseHeld:
		defer releaseLease(f)
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("cannot read: larger than %d MiB", max(limit>>20, 1))
	}
	after, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("cannot read: %w", err)
	}
	if int64(len(data)) != after.Size() || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		return nil, errSaveInProgress
	}
	return data, nil
}

// errSaveInProgress refuses a file that was being written while it was read.
var errSaveInProgress = errors.New("was being written while it was read, as a save in progress does; its last good version stays in force until the save ends")

// settled says no save is in progress: no manifest is open for writing or
// was modified within the debounce. Anything it cannot tell counts as
// settled; the reload reports it.
func (s *Source) settled() bool {
	if !s.rootDir {
		return fileSettled(s.root, s.debounce, time.Now())
	}
	names, err := manifestNames(s.root)
	if err != nil {
		return true
	}
	now := time.Now()
	for _, name := range names {
		if !fileSettled(filepath.Join(s.root, name), s.debounce, now) {
			return false
		}
	}
	return true
}

func fileSettled(path string, debounce time.Duration, now time.Time) bool {
	f, info, err := openRegular(path)
	if err != nil {
		return true
	}
	defer f.Close()
	if age := now.Sub(info.ModTime()); age >= 0 && age < debounce {
		return false
	}
	return !openForWriting(f)
}

// openForWriting says some process holds the file open for writing (an
// editor between its truncation and its last write). Without the right to
// take leases it says false, and the modification time alone tells a save
// in progress.
func openForWriting(f *os.File) bool {
	lease := takeReadLease(f)
	if lease == leaseHeld {
		releaseLease(f)
	}
	return lease == leaseBusy
}

// leaseResult is what asking for a read lease on a file got.
type leaseResult int

const (
	// leaseUnavailable: leases cannot be taken here (no CAP_LEASE on
	// someone else's file, leases disabled, a file system without them).
	leaseUnavailable leaseResult = iota
	// leaseBusy: the kernel refuses a read lease on a file some process
	// holds open for writing.
	leaseBusy
	// leaseHeld: granted; until it is released, an open for writing or a
	// truncation waits.
	leaseHeld
)

func takeReadLease(f *os.File) leaseResult {
	raw, err := f.SyscallConn()
	if err != nil {
		return leaseUnavailable
	}
	res := leaseUnavailable
	_ = raw.Control(func(fd uintptr) {
		_, err := unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_RDLCK)
		switch {
		case err == nil:
			res = leaseHeld
		case errors.Is(err, unix.EAGAIN):
			res = leaseBusy
		}
	})
	return res
}

func releaseLease(f *os.File) {
	if raw, err := f.SyscallConn(); err == nil {
		_ = raw.Control(func(fd uintptr) { _, _ = unix.FcntlInt(fd, unix.F_SETLEASE, unix.F_UNLCK) })
	}
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
