package main

import (
	"encoding/json"
	"hash/fnv"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"
)

// fakeEmbedServer is an in-test OpenAI-compatible /v1/embeddings server.
// A vector hashes the words of its text into dim buckets with the model's
// name as salt: texts sharing words are near under one model, and two
// models of one dimension make unrelated vectors (as two real models
// would). Queries are the calls whose one input starts with "query ";
// everything else is a document batch.
//
// Document calls pass while the pass budget lasts (unlimited unless
// holdAfter is called), then wait until release; a held call whose client
// goes away ends. The counters record calls open at once, overall and of
// documents, across every instance that calls it.
type fakeEmbedServer struct {
	t   testing.TB
	srv *httptest.Server
	dim int

	inFlight, maxInFlight       atomic.Int32
	docInFlight, maxDocInFlight atomic.Int32
	docCalls, queryCalls        atomic.Int32
	// docArrived receives the number of documents calls in flight each time
	// a document call arrives (dropped when full).
	docArrived chan int32
	// throttle, when set, answers a document call 429 with this
	// Retry-After once, then is cleared.
	throttle atomic.Pointer[string]

	// cost, when set, is how long a call of n texts computes (a benchmark's
	// model); with serial, one call computes at a time, as in a model
	// server with one worker.
	cost   func(n int) time.Duration
	serial bool
	busy   sync.Mutex

	mu     sync.Mutex
	budget int           // document calls that pass before holding; <0: all
	gate   chan struct{} // closed: held calls go on
	texts  map[string]int
}

func newFakeEmbedServer(t testing.TB, dim int) *fakeEmbedServer {
	f := &fakeEmbedServer{t: t, dim: dim, budget: -1, gate: make(chan struct{}), texts: map[string]int{},
		docArrived: make(chan int32, 1000)}
	close(f.gate)
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the OpenAI base URL (…/v1).
func (f *fakeEmbedServer) URL() string { return f.srv.URL + "/v1" }

// holdAfter lets n more document calls through, then holds the rest until
// release.
func (f *fakeEmbedServer) holdAfter(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.budget = n
	select {
	case <-f.gate:
		f.gate = make(chan struct{})
	default:
	}
}

// release lets every held and later document call through.
func (f *fakeEmbedServer) release() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.budget = -1
	select {
	case <-f.gate:
	default:
		close(f.gate)
	}
}

// embedded returns how many times text was embedded as a document by model.
func (f *fakeEmbedServer) embedded(model, text string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.texts[model+"\x00"+text]
}

func (f *fakeEmbedServer) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/embeddings" {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Model string   `json:"model"`
		Input []string `json:"input"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	raiseMax(&f.maxInFlight, f.inFlight.Add(1))
	defer f.inFlight.Add(-1)
	if len(req.Input) == 1 && strings.HasPrefix(req.Input[0], "query ") {
		f.queryCalls.Add(1)
	} else {
		n := f.docInFlight.Add(1)
		defer f.docInFlight.Add(-1)
		raiseMax(&f.maxDocInFlight, n)
		f.docCalls.Add(1)
		select {
		case f.docArrived <- n:
		default:
		}
		if ra := f.throttle.Swap(nil); ra != nil {
			w.Header().Set("Retry-After", *ra)
			http.Error(w, `{"error":{"message":"rate limited"}}`, http.StatusTooManyRequests)
			return
		}
		if !f.pass(r) {
			return
		}
		f.mu.Lock()
		for _, in := range req.Input {
			f.texts[req.Model+"\x00"+in]++
		}
		f.mu.Unlock()
	}
	if f.cost != nil {
		if f.serial {
			f.busy.Lock()
			defer f.busy.Unlock()
		}
		select {
		case <-time.After(f.cost(len(req.Input))):
		case <-r.Context().Done():
			return
		}
	}
	type item struct {
		Index     int       `json:"index"`
		Embedding []float32 `json:"embedding"`
	}
	out := struct {
		Data []item `json:"data"`
	}{}
	for i, in := range req.Input {
		out.Data = append(out.Data, item{Index: i, Embedding: fakeVector(req.Model, in, f.dim)})
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// pass waits until a document call may go on; false when its client left.
func (f *fakeEmbedServer) pass(r *http.Request) bool {
	f.mu.Lock()
	gate := f.gate
	if f.budget != 0 {
		if f.budget > 0 {
			f.budget--
		}
		f.mu.Unlock()
		return true
	}
	f.mu.Unlock()
	select {
	case <-gate:
		return true
	case <-r.Context().Done():
		return false
	}
}

// fakeVector hashes the words of text, salted with the model, into dim
// signed buckets, normalized.
func fakeVector(model, text string, dim int) []float32 {
	text = strings.TrimPrefix(text, "query ")
	v := make([]float32, dim)
	for _, w := range strings.FieldsFunc(strings.ToLower(text), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }) {
		h := fnv.New64a()
		h.Write([]byte(model + "/" + w))
		x := h.Sum64()
		sign := float32(1)
		if x&1 == 1 {
			sign = -1
		}
		v[(x>>1)%uint64(dim)] += sign
	}
	var norm float64
	for _, x := range v {
		norm += float64(x * x)
	}
	if norm == 0 {
		v[0] = 1
		return v
	}
	for i := range v {
		v[i] = float32(float64(v[i]) / math.Sqrt(norm))
	}
	return v
}
