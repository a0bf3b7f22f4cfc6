package serviceview

import (
	"bufio"
	"encoding/json"
	"net/http"
	"sync/atomic"

	"kproxy.dev/kproxy/sync/mode"
	"kproxy.dev/kproxy/sync/servicemap"
)

// Source is what the page is built from: the running mode and the
// snapshot it has in force.
type Source struct {
	Mode mode.Name
	Node string
	// InForce returns the snapshot the mode last fully programmed, nil
	// before the first sync (engine.Engine.InForce).
	InForce func() *servicemap.Snapshot
	// Programmed is the mode's mode.Describer, nil when it has none.
	Programmed mode.Describer
}

// Handler serves /services. The metrics server is bound before the mode
// and the engine exist, so the handler is made first and given its Source
// with Attach; until then it answers 503.
//
// GET /services is JSON (Page); ?format=text is the table of WriteText;
// ?service=namespace or ?service=namespace/name narrows it.
type Handler struct {
	src atomic.Pointer[Source]
}

// Attach sets what the page shows.
func (h *Handler) Attach(s Source) { h.src.Store(&s) }

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "only GET", http.StatusMethodNotAllowed)
		return
	}
	format := r.URL.Query().Get("format")
	if format != "" && format != "json" && format != "text" {
		http.Error(w, "format must be json or text", http.StatusBadRequest)
		return
	}
	src := h.src.Load()
	if src == nil {
		http.Error(w, "kproxy is starting: the proxy mode is not running yet", http.StatusServiceUnavailable)
		return
	}
	var programmed func(servicemap.ServicePortName) mode.Programmed
	if src.Programmed != nil {
		programmed = src.Programmed.Programmed()
	}
	page := Build(src.Mode, src.Node, src.InForce(), programmed, ParseFilter(r.URL.Query().Get("service")))
	bw := bufio.NewWriterSize(w, 64<<10)
	if format == "text" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_ = WriteText(bw, page)
	} else {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(bw)
		enc.SetIndent("", "  ")
		_ = enc.Encode(page)
	}
	_ = bw.Flush()
}
