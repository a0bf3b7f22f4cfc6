package filesource

import (
	"cmp"
	"fmt"
	"net/netip"
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
	// err, when set, means the file could not be read or is empty: its
	// objects from the last good read stay in force.
	err  error
	docs []document
	// size is how many bytes were read.
	size int64
}

// held says the file's last good version stays in force as a whole (bar
// what valid documents now define): it could not be read, is empty, or
// holds a document that could not be parsed, whose boundaries are unknown.
func (r fileRead) held() bool {
	return r.err != nil || slices.ContainsFunc(r.docs, document.unparsed)
}

// reconcileResult is the state a reload arrived at.
type reconcileResult struct {
	next state
	// errs lists every file and document problem: file errors first, then
	// documents in file and document order.
	errs []error
	// rejected counts rejected documents (file errors are not documents).
	rejected int
	// heldFiles counts files held as a whole (see fileRead.held).
	heldFiles int
	// kept counts the objects of next that are a last good version kept in
	// place of a rejected document or file.
	kept int
}

// reconcile builds the new state from what was read, keeping the last good
// version of anything that could not be read or turned invalid. Files not
// in reads (deleted) lose their objects. A document is "the same" as before
// when it names the same object or, if it is parsed but cannot be named, sits
// at the same position of the same file. A file that is held (see
// fileRead.held) keeps every object of its last good version that no valid
// document defines. Claims on cluster IPs and node ports are then checked
// across objects (see claimConflicts): a document losing one is rejected, and
// the state built again, until no conflict is left.
func reconcile(prev state, reads []fileRead) reconcileResult {
	docs := map[position]*document{}
	for _, r := range reads {
		for i := range r.docs {
			docs[r.docs[i].pos] = &r.docs[i]
		}
	}
	for {
		res := build(prev, reads)
		marked := false
		for pos, err := range claimConflicts(prev, res.next) {
			marked = markRejected(docs[pos], err) || marked
		}
		// Each round rejects at least one more document, or is the last.
		if !marked {
			collectErrors(&res, reads)
			return res
		}
	}
}

// build makes the state of the valid documents and of the last good versions
// that the rejected ones and held files leave in force. It marks duplicates
// rejected in reads.
func build(prev state, reads []fileRead) reconcileResult {
	res := reconcileResult{next: state{}}

	// Valid documents first, in file then document order, so the earlier of
	// two documents defining one object wins.
	for _, r := range reads {
		if r.err != nil {
			continue
		}
		for i := range r.docs {
			d := &r.docs[i]
			if d.err != nil {
				continue
			}
			if earlier, dup := res.next[d.key]; dup {
				d.err = &DocumentError{
					File: d.pos.File, Document: d.pos.Doc, Item: d.pos.Item, Line: d.pos.Line, Object: d.key.String(),
					Err: duplicateError(earlier.pos),
				}
				d.obj = nil
				continue
			}
			res.next[d.key] = entry{obj: d.obj, pos: d.pos}
		}
	}

	// Then what invalid documents and held files leave in force. What is
	// kept does not depend on the order it is kept in.
	byFile := map[string][]objectKey{}
	for key, e := range prev {
		byFile[e.pos.File] = append(byFile[e.pos.File], key)
	}
	keep := func(key objectKey, e entry) {
		if _, taken := res.next[key]; !taken {
			res.next[key] = e
			res.kept++
		}
	}
	for _, r := range reads {
		held := r.held()
		if held {
			res.heldFiles++
		}
		for _, d := range r.docs {
			if d.err == nil {
				continue
			}
			if d.key.known() {
				if e, ok := prev[d.key]; ok {
					// The object now lives in this document, so deleting
					// the document deletes it.
					keep(d.key, entry{obj: e.obj, pos: d.pos})
				}
				continue
			}
			if held {
				continue // the whole file is kept below
			}
			for _, key := range byFile[d.pos.File] {
				e := prev[key]
				if e.pos.Doc == d.pos.Doc && (d.pos.Item == 0 || e.pos.Item == d.pos.Item) {
					keep(key, e)
				}
			}
		}
		if held {
			for _, key := range byFile[r.name] {
				keep(key, prev[key])
			}
		}
	}
	return res
}

// collectErrors lists the file errors, then every rejected document, and
// counts the rejected documents.
func collectErrors(res *reconcileResult, reads []fileRead) {
	for _, r := range reads {
		if r.err != nil {
			res.errs = append(res.errs, &FileError{File: r.name, Err: r.err})
		}
	}
	for _, r := range reads {
		for _, d := range r.docs {
			if d.err != nil {
				res.rejected++
				res.errs = append(res.errs, d.err)
			}
		}
	}
}

// markRejected records a late rejection (a lost claim) on d, and says
// whether d was valid until then.
func markRejected(d *document, err error) bool {
	if d == nil || d.err != nil {
		return false
	}
	d.err = &DocumentError{
		File: d.pos.File, Document: d.pos.Doc, Item: d.pos.Item, Line: d.pos.Line, Object: d.key.String(), Err: err,
	}
	d.obj = nil
	return true
}

// String names the position as errors do: "a.yaml document 2 item 1".
func (p position) String() string {
	s := p.File + " document " + strconv.Itoa(p.Doc)
	if p.Item > 0 {
		s += " item " + strconv.Itoa(p.Item)
	}
	return s
}

// compare orders positions by file, document and item.
func (p position) compare(o position) int {
	return cmp.Or(cmp.Compare(p.File, o.File), cmp.Compare(p.Doc, o.Doc), cmp.Compare(p.Item, o.Item))
}

func duplicateError(earlier position) error {
	return &fieldError{msg: "duplicate object: already defined in " + earlier.String()}
}

// claim is something only one object may hold, as the API server's
// allocators see to: a cluster IP, or a node port (of any protocol).
type claim struct {
	ip       netip.Addr // a cluster IP, or
	nodePort int32      // a node port
}

func (c claim) String() string {
	if c.ip.IsValid() {
		return "cluster IP " + c.ip.String()
	}
	return "node port " + strconv.Itoa(int(c.nodePort))
}

// claimAt is a claim and the field making it: spec.clusterIPs[index],
// spec.ports[index].nodePort, or spec.healthCheckNodePort (index -1).
type claimAt struct {
	claim
	index int
}

func (c claimAt) path() string {
	switch {
	case c.ip.IsValid():
		return "spec.clusterIPs[" + strconv.Itoa(c.index) + "]"
	case c.index < 0:
		return "spec.healthCheckNodePort"
	default:
		return "spec.ports[" + strconv.Itoa(c.index) + "].nodePort"
	}
}

// claims lists what obj holds, one entry per claim (a node port one service
// uses for TCP and UDP is one claim).
func claims(obj runtime.Object) []claimAt {
	svc, ok := obj.(*v1.Service)
	if !ok {
		return nil
	}
	var out []claimAt
	add := func(c claim, index int) {
		for _, o := range out {
			if o.claim == c {
				return
			}
		}
		out = append(out, claimAt{c, index})
	}
	if svc.Spec.ClusterIP != v1.ClusterIPNone {
		for i, ip := range svc.Spec.ClusterIPs {
			if addr, err := netip.ParseAddr(ip); err == nil {
				add(claim{ip: addr.Unmap()}, i)
			}
		}
	}
	for i, p := range svc.Spec.Ports {
		if p.NodePort != 0 {
			add(claim{nodePort: p.NodePort}, i)
		}
	}
	if hc := svc.Spec.HealthCheckNodePort; hc != 0 {
		add(claim{nodePort: hc}, -1)
	}
	return out
}

// claimConflicts finds the objects of next that claim what another holds,
// and returns the rejection of each loser's document by position. An object
// keeps a claim its last good version (in prev) held, as an allocation made
// earlier stands in the API server; other claims go to the first object in
// file and document order. Objects kept from prev never lose: prev has no
// conflicts, and they hold all their claims there.
func claimConflicts(prev, next state) map[position]error {
	owners := map[claim]objectKey{}
	for key, e := range prev {
		for _, c := range claims(e.obj) {
			owners[c.claim] = key
		}
	}
	// Only Services claim anything; file and document order decides.
	var keys []objectKey
	for key := range next {
		if key.Kind == kindService {
			keys = append(keys, key)
		}
	}
	slices.SortFunc(keys, func(a, b objectKey) int {
		return cmp.Or(next[a].pos.compare(next[b].pos), cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	all := make([][]claimAt, len(keys))
	holder := map[claim]objectKey{}
	for i, key := range keys {
		all[i] = claims(next[key].obj)
		for _, c := range all[i] {
			if owners[c.claim] == key {
				holder[c.claim] = key
			}
		}
	}
	losers := map[position]error{}
	for i, key := range keys {
		var errs errorList
		for _, c := range all[i] {
			if h, held := holder[c.claim]; held && h != key {
				errs = append(errs, &fieldError{path: c.path(), msg: fmt.Sprintf("%s is already allocated to %s (%s)", c.claim, h, next[h].pos)})
			}
		}
		if len(errs) > 0 {
			losers[next[key].pos] = errs.asError()
			continue
		}
		for _, c := range all[i] {
			holder[c.claim] = key
		}
	}
	return losers
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
