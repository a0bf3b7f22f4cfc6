package filesource

import (
	"cmp"
	"slices"
	"strconv"

	v1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"kproxy.dev/kproxy/sync/servicemap"
)

// entry is one object in force and the document it came from; the document
// is how a later reload finds it again when the document turns invalid.
type entry struct {
	obj runtime.Object
	pos position
}

// state is every object in force, by identity.
type state map[objectKey]entry

// fileRead is the outcome of reading one file.
type fileRead struct {
	name string
	// err, when set, means the file could not be read: its objects from the
	// last good read stay in force.
	err  error
	docs []document
}

// reconcileResult is the state a reload arrived at.
type reconcileResult struct {
	next state
	// errs lists every file and document problem, in file and document order.
	errs []error
	// rejected counts rejected documents (file errors are not documents).
	rejected int
}

// reconcile builds the new state from what was read, keeping the last good
// version of anything that could not be read or turned invalid. Files not
// in reads (deleted) lose their objects; a document is "the same" as before
// when it names the same object or, if it cannot be decoded that far, sits at
// the same position of the same file.
func reconcile(prev state, reads []fileRead) reconcileResult {
	res := reconcileResult{next: state{}}

	// Valid documents first, in file then document order, so the earlier of
	// two documents defining one object wins.
	for _, r := range reads {
		if r.err != nil {
			res.errs = append(res.errs, &FileError{File: r.name, Err: r.err})
			continue
		}
		for _, d := range r.docs {
			if d.err != nil {
				continue
			}
			if earlier, dup := res.next[d.key]; dup {
				d.err = &DocumentError{
					File: d.pos.File, Document: d.pos.Doc, Item: d.pos.Item, Line: d.pos.Line, Object: d.key.String(),
					Err: duplicateError(earlier.pos),
				}
				markRejected(r.docs, d)
				continue
			}
			res.next[d.key] = entry{obj: d.obj, pos: d.pos}
		}
	}

	// Then what invalid documents and unreadable files leave in force.
	keep := func(key objectKey, e entry) {
		if _, taken := res.next[key]; !taken {
			res.next[key] = e
		}
	}
	for _, r := range reads {
		if r.err != nil {
			for key, e := range prev {
				if e.pos.File == r.name {
					keep(key, e)
				}
			}
			continue
		}
		for _, d := range r.docs {
			if d.err == nil {
				continue
			}
			res.rejected++
			res.errs = append(res.errs, d.err)
			if d.key.known() {
				if e, ok := prev[d.key]; ok {
					// The object now lives in this document, so deleting
					// the document deletes it.
					keep(d.key, entry{obj: e.obj, pos: d.pos})
				}
				continue
			}
			for key, e := range prev {
				if e.pos.File == d.pos.File && e.pos.Doc == d.pos.Doc && (d.pos.Item == 0 || e.pos.Item == d.pos.Item) {
					keep(key, e)
				}
			}
		}
	}
	return res
}

// markRejected records a late rejection (a duplicate) in the file's documents.
func markRejected(docs []document, rejected document) {
	for i := range docs {
		if docs[i].pos == rejected.pos {
			docs[i].err = rejected.err
			docs[i].obj = nil
		}
	}
}

func duplicateError(earlier position) error {
	where := earlier.File + " document " + strconv.Itoa(earlier.Doc)
	if earlier.Item > 0 {
		where += " item " + strconv.Itoa(earlier.Item)
	}
	return &fieldError{msg: "duplicate object: already defined in " + where}
}

// diffCounts says how many sink calls a reload made.
type diffCounts struct {
	updated, deleted int
}

// applyDiff hands the sink every object of next that is new or changed since
// prev, and deletes every object that went away. Only the Node named
// nodeName reaches the sink. Deletes go first so a renamed object never
// briefly exists twice.
func applyDiff(sink servicemap.Sink, nodeName string, prev, next state) diffCounts {
	var counts diffCounts
	relevant := func(key objectKey) bool { return key.Kind != kindNode || key.Name == nodeName }

	for _, key := range sortedKeys(prev) {
		if _, still := next[key]; still || !relevant(key) {
			continue
		}
		counts.deleted++
		nn := types.NamespacedName{Namespace: key.Namespace, Name: key.Name}
		switch key.Kind {
		case kindService:
			sink.OnServiceDelete(nn)
		case kindEndpointSlice:
			sink.OnEndpointSliceDelete(nn)
		case kindNode:
			sink.OnNodeDelete()
		}
	}
	for _, key := range sortedKeys(next) {
		e := next[key]
		if old, had := prev[key]; (had && apiequality.Semantic.DeepEqual(old.obj, e.obj)) || !relevant(key) {
			continue
		}
		counts.updated++
		// The sink may keep what it is handed; the state keeps its own copy.
		switch o := e.obj.(type) {
		case *v1.Service:
			sink.OnServiceUpdate(o.DeepCopy())
		case *discovery.EndpointSlice:
			sink.OnEndpointSliceUpdate(o.DeepCopy())
		case *v1.Node:
			sink.OnNodeUpdate(o.DeepCopy())
		}
	}
	return counts
}

// kindOrder hands Services over before their EndpointSlices.
func kindOrder(kind string) int {
	switch kind {
	case kindNode:
		return 0
	case kindService:
		return 1
	default:
		return 2
	}
}

func sortedKeys(s state) []objectKey {
	keys := make([]objectKey, 0, len(s))
	for k := range s {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b objectKey) int {
		return cmp.Or(cmp.Compare(kindOrder(a.Kind), kindOrder(b.Kind)),
			cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return keys
}
