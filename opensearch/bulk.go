package opensearch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/ragent-go/ragent/service"
)

// Bulk limits: a batch closes at DefaultMaxBulkBytes of documents or
// DefaultMaxBulkItems chunks, well under OpenSearch's 100 MB
// http.max_content_length (a rebuild doubles a batch: it is written to two
// aliases, and the encoded request is split again when it exceeds the
// byte cap).
const (
	DefaultMaxBulkBytes = 8 << 20
	DefaultMaxBulkItems = 2000
	// bulkFlushes is the bulk requests in flight at once; the callers
	// arriving meanwhile wait and go out together in the next one.
	bulkFlushes = 2
)

// item is one chunk's action: index src under id, or delete id (src nil).
type item struct {
	id  string
	src []byte
	// vecField and dim name the chunk's knn_vector field, when it has one.
	vecField string
	dim      int
}

// call is one caller's items in the batcher: done once every item went out
// in some batch, with the first error any of them met.
type call struct {
	items    []item
	taken    int  // items handed to batches
	left     int  // items whose batch has not finished
	visible  bool // wait until they are searchable
	err      error
	done     chan struct{}
	wake     chan struct{} // lead a flush: a flusher left work behind
	finished bool
}

// entry is an item with the call it belongs to.
type entry struct {
	call *call
	item item
}

// batcher coalesces concurrent callers' chunk writes into shared bulk
// requests (group commit): while bulkFlushes requests are in flight, new
// callers queue, and the next flusher takes as many queued items as fit in
// one request. A caller flushes itself when a slot is free, so a lone
// writer waits for nothing but its own request.
type batcher struct {
	c                  *Client
	maxBytes, maxItems int

	mu       sync.Mutex
	queue    []*call
	flushing int
}

// submit queues a call and returns when its items are written (or failed).
func (b *batcher) submit(ctx context.Context, cl *call) error {
	if len(cl.items) == 0 {
		return nil
	}
	cl.left, cl.done, cl.wake = len(cl.items), make(chan struct{}), make(chan struct{}, 1)
	b.mu.Lock()
	b.queue = append(b.queue, cl)
	b.mu.Unlock()
	for {
		b.pump(cl)
		select {
		case <-cl.done:
			return cl.err
		case <-cl.wake:
		case <-ctx.Done():
			// The items may still go out with another caller's batch:
			// writes are idempotent.
			return ctx.Err()
		}
	}
}

// pump flushes batches while a slot is free and work is queued, until the
// caller's own call is done; work left behind wakes the queued callers.
func (b *batcher) pump(own *call) {
	for {
		b.mu.Lock()
		if own.finished || len(b.queue) == 0 || b.flushing >= bulkFlushes {
			b.mu.Unlock()
			return
		}
		b.flushing++
		batch := b.take()
		b.mu.Unlock()

		b.flush(batch)

		b.mu.Lock()
		b.flushing--
		for _, cl := range b.queue {
			select {
			case cl.wake <- struct{}{}:
			default:
			}
		}
		b.mu.Unlock()
	}
}

// take removes the next batch from the queue: whole calls and, at the
// limits, part of one (a call larger than a batch is spread over several).
func (b *batcher) take() []entry {
	var batch []entry
	size := 0
	for len(b.queue) > 0 && len(batch) < b.maxItems {
		cl := b.queue[0]
		for cl.taken < len(cl.items) && len(batch) < b.maxItems {
			it := cl.items[cl.taken]
			if len(batch) > 0 && size+len(it.src)+128 > b.maxBytes {
				return batch
			}
			batch = append(batch, entry{call: cl, item: it})
			size += len(it.src) + 128
			cl.taken++
		}
		if cl.taken == len(cl.items) {
			b.queue = b.queue[1:]
		}
	}
	return batch
}

// flush writes a batch and settles its calls. The request has its own
// deadline (the client's timeout), not a caller's context: it carries
// other callers' items too.
func (b *batcher) flush(batch []entry) {
	ctx := context.Background()
	err := b.send(ctx, batch)
	b.mu.Lock()
	defer b.mu.Unlock()
	for i, e := range batch {
		cl := e.call
		if cl.err == nil {
			cl.err = err[i]
		}
		cl.left--
		if cl.left == 0 && !cl.finished {
			cl.finished = true
			close(cl.done)
		}
	}
}

// send writes entries through the live alias and, while a rebuild runs,
// the next one, in one bulk request or in halves when the encoded request
// is over the byte cap or OpenSearch refuses it as too large; it returns
// each entry's error. A single chunk that OpenSearch refuses as too large
// is a permanent failure: retrying cannot shrink it.
//
// Whether a rebuild runs is asked in the write itself, not before it: the
// request to the live alias carries one more action, a delete of an id no
// chunk has (probeID) through the next alias, which OpenSearch resolves
// against the same cluster state as the writes. Only when that alias
// exists (a rebuild began before the request) do the entries go out once
// more, to it. So a write costs one round trip, and a rebuild that begins
// after it (under the rebuild lock, after the writer's commit) reads the
// chunks from Postgres.
func (b *batcher) send(ctx context.Context, batch []entry) []error {
	errs, next := b.sendTo(ctx, b.c.Alias(), batch, true)
	if !next {
		return errs
	}
	nextErrs, _ := b.sendTo(ctx, b.c.nextAlias(), batch, false)
	for i, err := range nextErrs {
		if isStatus(err, http.StatusNotFound) {
			// The rebuild finished between the two requests and the next
			// alias is gone: the live alias is on the rebuilt index now,
			// which the first request may have missed.
			return b.send(ctx, batch)
		}
		if errs[i] == nil {
			errs[i] = err
		}
	}
	return errs
}

// probeID is the _id of the delete that asks whether the next alias
// exists: chunk ids are decimal numbers, so it never deletes one.
const probeID = "rebuild-probe"

// sendTo writes entries through alias, with the probe of the next alias
// when probe is set, and reports whether the probe found it.
func (b *batcher) sendTo(ctx context.Context, alias string, batch []entry, probe bool) ([]error, bool) {
	errs := make([]error, len(batch))
	fill := func(err error) ([]error, bool) {
		for i := range errs {
			errs[i] = err
		}
		return errs, false
	}
	if err := b.c.ensureVectorFields(ctx, []string{alias}, batch); err != nil {
		return fill(err)
	}
	body, visible, err := encodeBulk([]string{alias}, batch)
	if err != nil {
		return fill(err)
	}
	tooLarge := len(body) > b.maxBytes
	if !tooLarge {
		n := len(batch)
		if probe {
			body = append(body, `{"delete":{"_index":"`+b.c.nextAlias()+`","_id":"`+probeID+`"}}`+"\n"...)
			n++
		}
		path := "/_bulk?require_alias=true"
		if visible && probe {
			path += "&refresh=wait_for"
		}
		var results []bulkResult
		results, err = b.c.bulkResults(ctx, path, body, n)
		tooLarge = isStatus(err, http.StatusRequestEntityTooLarge)
		if err == nil {
			for i := range batch {
				errs[i] = results[i].err
			}
			// The probe: a delete through an alias that exists finds
			// nothing (404, no error); one through a name that is no
			// alias fails (404, index_not_found_exception).
			return errs, probe && results[n-1].status == http.StatusNotFound && !results[n-1].failed
		}
	}
	if !tooLarge {
		return fill(err)
	}
	if len(batch) == 1 {
		return fill(fmt.Errorf("%w: %w: chunk %s: its bulk request of %d bytes is more than OpenSearch accepts (http.max_content_length)",
			service.ErrPermanent, service.ErrTooLarge, batch[0].item.id, len(body)))
	}
	half := len(batch) / 2
	first, next1 := b.sendTo(ctx, alias, batch[:half], probe)
	second, next2 := b.sendTo(ctx, alias, batch[half:], probe)
	return append(first, second...), next1 || next2
}

// encodeBulk is the NDJSON of entries written to every alias, and whether
// any of them must be searchable when the request returns.
func encodeBulk(aliases []string, batch []entry) ([]byte, bool, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	visible := false
	for _, alias := range aliases {
		for _, e := range batch {
			visible = visible || e.call.visible
			op := "index"
			if e.item.src == nil {
				op = "delete"
			}
			if err := enc.Encode(map[string]any{op: map[string]any{"_index": alias, "_id": e.item.id}}); err != nil {
				return nil, false, err
			}
			if e.item.src != nil {
				buf.Write(e.item.src)
				buf.WriteByte('\n')
			}
		}
	}
	return buf.Bytes(), visible, nil
}

// bulkResult is one action's outcome: its status, whether OpenSearch
// reported an error for it, and the error ragent sees (nil for success
// and for the delete of a document already gone).
type bulkResult struct {
	status int
	failed bool
	err    error
}

// bulkResults sends an NDJSON bulk body of n actions and returns each
// action's result, in request order. A rejected item (a full queue, an
// alias swapped away) is ErrSearchUnavailable, which a retry of the
// idempotent write settles; one whose alias does not exist also answers
// isStatus(err, 404).
func (c *Client) bulkResults(ctx context.Context, path string, body []byte, n int) ([]bulkResult, error) {
	var out struct {
		Errors bool `json:"errors"`
		Items  []map[string]struct {
			Status int             `json:"status"`
			Error  json.RawMessage `json:"error"`
		} `json:"items"`
	}
	if err := c.do(ctx, http.MethodPost, path, body, &out); err != nil {
		return nil, err
	}
	res := make([]bulkResult, n)
	for i, item := range out.Items {
		if i >= n {
			break
		}
		for op, r := range item {
			res[i].status, res[i].failed = r.Status, len(r.Error) > 0 && string(r.Error) != "null"
			if r.Status/100 != 2 && (op != "delete" || r.Status != http.StatusNotFound || res[i].failed) {
				res[i].err = fmt.Errorf("%w: bulk %s: %w", service.ErrSearchUnavailable, op, &statusError{status: r.Status, body: string(r.Error)})
			}
		}
	}
	return res, nil
}

// bulkItems is bulkResults's errors.
func (c *Client) bulkItems(ctx context.Context, path string, body []byte, n int) ([]error, error) {
	res, err := c.bulkResults(ctx, path, body, n)
	if err != nil {
		return nil, err
	}
	errs := make([]error, n)
	for i, r := range res {
		errs[i] = r.err
	}
	return errs, nil
}

// bulkAll sends a bulk body of n actions and returns the first action's
// error.
func (c *Client) bulkAll(ctx context.Context, path string, body []byte, n int) error {
	errs, err := c.bulkItems(ctx, path, body, n)
	if err != nil {
		return err
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// ensureVectorFields adds the knn_vector fields of a batch's chunks to the
// mappings of targets (a no-op for fields already there).
func (c *Client) ensureVectorFields(ctx context.Context, targets []string, batch []entry) error {
	fields := map[string]any{}
	for _, e := range batch {
		if e.item.vecField == "" {
			continue
		}
		fields[e.item.vecField] = map[string]any{"type": "knn_vector", "dimension": e.item.dim,
			"method": map[string]any{"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil",
				"parameters": map[string]any{"m": 16, "ef_construction": 64}}}
	}
	if len(fields) == 0 {
		return nil
	}
	return c.do(ctx, http.MethodPut, "/"+strings.Join(targets, ",")+"/_mapping", map[string]any{"properties": fields}, nil)
}
