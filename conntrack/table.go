package conntrack

// Table is the conntrack table of the network namespace kproxy runs in,
// narrowed to the one operation cleanup needs.
type Table interface {
	// Delete walks req.Family's flows once, deletes every flow req's
	// Matcher selects, and returns how many it deleted. On an error some
	// flows may have been deleted and others not; running the same request
	// again is safe.
	Delete(req *Request) (deleted int, err error)
}
