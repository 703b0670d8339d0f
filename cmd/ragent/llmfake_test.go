package main

import (
	"context"
	"encoding/json"
	"fmt"
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

// fakeLLM is an in-test OpenAI-compatible server. The behaviour of a chat
// request is chosen by a marker in its last user message:
//
//	#slow     stream 40 pieces 50 ms apart (a long answer)
//	#medium   stream 40 pieces 10 ms apart
//	#crawl    stream 40 pieces 200 ms apart (a browser reloads meanwhile)
//	#endless  stream 300 pieces 200 ms apart (an answer only a stop ends)
//	#429      answer 429 with Retry-After: 1 once per question, then stream
//	#500      always answer 500
//	#firstslow wait 3 s before the first token
//	#silent   send nothing until the caller gives up
//	#think    stream reasoning_content before the answer
//	#gate     hold the answer (after it is counted as started) until the
//	          test calls open(question); started reports it, and a caller
//	          that gives up meanwhile is recorded as abandoned
//
// JSON requests (intent scoring) get garbage when garbageJSON is set.
// Title requests take 200 ms when slowTitles is set. calls and maxCalls
// count every request at once, of all kinds (rewrite, intent, answer,
// title).
type fakeLLM struct {
	t   testing.TB
	srv *httptest.Server

	garbageJSON atomic.Bool
	slowTitles  atomic.Bool
	calls       atomic.Int32 // requests of any kind open right now
	maxCalls    atomic.Int32
	active      atomic.Int32 // answer streams open right now
	maxActive   atomic.Int32
	streams     atomic.Int32 // answer streams started
	received    atomic.Int32 // chat requests received, of any kind
	// Requests that carried "enable_thinking": true and false (Qwen3's
	// switch, sent with RAGENT_LLM_THINKING=enable_thinking).
	thinkingOn, thinkingOff atomic.Int32
	status                  atomic.Int32 // when set, every request is answered with this status

	started chan string // questions of #gate answers, as their streams start

	mu        sync.Mutex
	requests  []fakeRequest // every request, in arrival order
	gates     map[string]chan struct{}
	abandoned map[string]time.Time // question → when the client went away mid-stream
	seen429   map[string]bool
}

func newFakeLLM(t testing.TB) *fakeLLM {
	f := &fakeLLM{t: t, abandoned: map[string]time.Time{}, seen429: map[string]bool{},
		gates: map[string]chan struct{}{}, started: make(chan string, 100)}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

// URL is the OpenAI base URL (…/v1).
func (f *fakeLLM) URL() string { return f.srv.URL + "/v1" }

type fakeRequest struct {
	Model          string `json:"model"`
	Stream         bool   `json:"stream"`
	MaxTokens      int    `json:"max_tokens"`
	EnableThinking *bool  `json:"enable_thinking"`
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	Messages []struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	} `json:"messages"`
}

func (f *fakeLLM) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" {
		http.NotFound(w, r)
		return
	}
	f.received.Add(1)
	if status := f.status.Load(); status != 0 {
		http.Error(w, `{"error":{"message":"unavailable"}}`, int(status))
		return
	}
	// A call counts as open until just before its last bytes go out: the
	// client cannot be done with it earlier, and its next call may follow at
	// once, before this handler has returned.
	raiseMax(&f.maxCalls, f.calls.Add(1))
	end := sync.OnceFunc(func() { f.calls.Add(-1) })
	defer end()
	r = r.WithContext(context.WithValue(r.Context(), endKey{}, end))
	var req fakeRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	switch {
	case req.EnableThinking == nil:
	case *req.EnableThinking:
		f.thinkingOn.Add(1)
	default:
		f.thinkingOff.Add(1)
	}
	f.mu.Lock()
	f.requests = append(f.requests, req)
	f.mu.Unlock()
	question := ""
	for _, m := range req.Messages {
		if m.Role == "user" {
			question = m.Content
		}
	}
	if req.ResponseFormat != nil && req.ResponseFormat.Type == "json_object" {
		if f.garbageJSON.Load() {
			f.stream(w, r, question, []string{"this is {not json"}, 0)
		} else {
			f.stream(w, r, question, []string{`{"scores":[]}`}, 0)
		}
		return
	}
	if strings.Contains(req.Messages[0].Content, "short title") {
		if f.slowTitles.Load() {
			f.stream(w, r, question, []string{"Test", " title"}, 100*time.Millisecond)
		} else {
			f.stream(w, r, question, []string{"Test title"}, 0)
		}
		return
	}
	switch {
	case strings.Contains(question, "#500"):
		http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
		return
	case strings.Contains(question, "#429"):
		f.mu.Lock()
		first := !f.seen429[question]
		f.seen429[question] = true
		f.mu.Unlock()
		if first {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":{"message":"rate limited"}}`, http.StatusTooManyRequests)
			return
		}
	case strings.Contains(question, "#silent"):
		<-r.Context().Done()
		return
	case strings.Contains(question, "#firstslow"):
		select {
		case <-time.After(3 * time.Second):
		case <-r.Context().Done():
			return
		}
	}
	if strings.Contains(question, "#think") {
		f.reason(w)
	}
	pieces, delay := []string{"Hello", " from", " the", " model", " [1]."}, 10*time.Millisecond
	if slow, medium, crawl, endless := strings.Contains(question, "#slow"), strings.Contains(question, "#medium"), strings.Contains(question, "#crawl"), strings.Contains(question, "#endless"); slow || medium || crawl || endless {
		pieces, delay = nil, 50*time.Millisecond
		n := 40
		switch {
		case medium:
			delay = 10 * time.Millisecond
		case crawl:
			delay = 200 * time.Millisecond
		case endless:
			n, delay = 300, 200*time.Millisecond
		}
		for i := 0; i < n; i++ {
			pieces = append(pieces, fmt.Sprintf("part%d ", i))
		}
	}
	f.answer(w, r, question, pieces, delay)
}

// endKey carries a request's end-of-call function to stream.
type endKey struct{}

// raiseMax records n in max if it is higher.
func raiseMax(max *atomic.Int32, n int32) {
	for {
		m := max.Load()
		if n <= m || max.CompareAndSwap(m, n) {
			return
		}
	}
}

// reason writes reasoning chunks (DeepSeek/Qwen style reasoning_content)
// ahead of the answer; the answer's headers then go out with them.
func (f *fakeLLM) reason(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	for _, r := range []string{"Let me think.", " The VPN guide applies."} {
		chunk, _ := json.Marshal(map[string]any{
			"id": "x", "object": "chat.completion.chunk",
			"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"reasoning_content": r}}},
		})
		fmt.Fprintf(w, "data: %s\n\n", chunk)
	}
}

// answer streams an answer, tracking concurrency and abandonment.
func (f *fakeLLM) answer(w http.ResponseWriter, r *http.Request, question string, pieces []string, delay time.Duration) {
	defer f.active.Add(-1)
	raiseMax(&f.maxActive, f.active.Add(1))
	f.streams.Add(1)
	if strings.Contains(question, "#gate") {
		f.started <- question
		select {
		case <-f.gate(question):
		case <-r.Context().Done():
			f.mu.Lock()
			f.abandoned[question] = time.Now()
			f.mu.Unlock()
			return
		}
	}
	if !f.stream(w, r, question, pieces, delay) {
		f.mu.Lock()
		f.abandoned[question] = time.Now()
		f.mu.Unlock()
	}
}

// stream writes OpenAI chunks; it reports false when the client went away.
func (f *fakeLLM) stream(w http.ResponseWriter, r *http.Request, question string, pieces []string, delay time.Duration) bool {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fl := w.(http.Flusher)
	for _, p := range pieces {
		chunk, _ := json.Marshal(map[string]any{
			"id": "x", "object": "chat.completion.chunk",
			"choices": []any{map[string]any{"index": 0, "delta": map[string]string{"content": p}}},
		})
		if _, err := fmt.Fprintf(w, "data: %s\n\n", chunk); err != nil {
			return false
		}
		fl.Flush()
		if delay > 0 {
			select {
			case <-time.After(delay):
			case <-r.Context().Done():
				return false
			}
		}
	}
	if end, ok := r.Context().Value(endKey{}).(func()); ok {
		end()
	}
	done, _ := json.Marshal(map[string]any{
		"id": "x", "object": "chat.completion.chunk",
		"choices": []any{map[string]any{"index": 0, "delta": map[string]string{}, "finish_reason": "stop"}},
		"usage":   map[string]int{"prompt_tokens": 10, "completion_tokens": len(pieces), "total_tokens": 10 + len(pieces)},
	})
	fmt.Fprintf(w, "data: %s\n\ndata: [DONE]\n\n", done)
	fl.Flush()
	return true
}

func (f *fakeLLM) gate(question string) chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	g, ok := f.gates[question]
	if !ok {
		g = make(chan struct{})
		f.gates[question] = g
	}
	return g
}

// nextStart returns the question of the next #gate answer that starts.
func (f *fakeLLM) nextStart(t testing.TB) string {
	t.Helper()
	select {
	case q := <-f.started:
		return q
	case <-time.After(30 * time.Second):
		t.Fatal("no answer started within 30 s")
		return ""
	}
}

// open lets a #gate answer stream.
func (f *fakeLLM) open(question string) { close(f.gate(question)) }

// request returns the last request whose messages contain s.
func (f *fakeLLM) request(s string) (fakeRequest, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i := len(f.requests) - 1; i >= 0; i-- {
		for _, m := range f.requests[i].Messages {
			if strings.Contains(m.Content, s) {
				return f.requests[i], true
			}
		}
	}
	return fakeRequest{}, false
}

func (f *fakeLLM) abandonedAt(question string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.abandoned[question]
	return at, ok
}

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
	// answered, when set, is called with a query call's text when its
	// answer is computed.
	answered func(query string)
	// arrived, when set, is called with a query call's text when it
	// reaches the server.
	arrived func(query string)

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
	if f.arrived != nil && len(req.Input) == 1 && strings.HasPrefix(req.Input[0], "query ") {
		f.arrived(req.Input[0])
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
	if f.answered != nil && len(req.Input) == 1 && strings.HasPrefix(req.Input[0], "query ") {
		f.answered(req.Input[0])
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
