package opensearch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

func TestNewRejectsBadConfig(t *testing.T) {
	for _, cfg := range []Config{
		{URL: "127.0.0.1:9200", Index: "ragent"},
		{URL: "ftp://127.0.0.1", Index: "ragent"},
		{URL: "http://127.0.0.1:9200", Index: ""},
		{URL: "http://127.0.0.1:9200", Index: "Ragent"},
		{URL: "http://127.0.0.1:9200", Index: "rag*"},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
}

// A cluster that does not answer, or answers 5xx, is ErrSearchUnavailable
// (503); a 4xx is a plain error (a bug, not an outage). Basic auth comes
// from the URL.
func TestErrorsAndAuth(t *testing.T) {
	var gotUser, gotPass string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotUser, gotPass, _ = r.BasicAuth()
		switch {
		case strings.HasSuffix(r.URL.Path, "/_search") && strings.HasPrefix(r.URL.Path, "/busy"):
			http.Error(w, `{"error":"circuit_breaking_exception"}`, http.StatusTooManyRequests)
		case strings.HasSuffix(r.URL.Path, "/_search") && strings.HasPrefix(r.URL.Path, "/broken"):
			http.Error(w, `{"error":"all shards failed"}`, http.StatusServiceUnavailable)
		default:
			http.Error(w, `{"error":"parsing_exception"}`, http.StatusBadRequest)
		}
	}))
	defer srv.Close()
	q := service.KeywordQuery{KnowledgeBaseIDs: []service.ID{1}, Terms: []service.TermCount{{Term: "x", Count: 1}}, Limit: 5}
	for index, unavailable := range map[string]bool{"busy": true, "broken": true, "bad": false} {
		c, err := New(Config{URL: strings.Replace(srv.URL, "http://", "http://u:p%40ss@", 1), Index: index})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.KeywordSearch(context.Background(), q)
		if err == nil || errors.Is(err, service.ErrSearchUnavailable) != unavailable {
			t.Errorf("%s: %v, unavailable %v", index, err, unavailable)
		}
		if gotUser != "u" || gotPass != "p@ss" {
			t.Errorf("basic auth %q %q", gotUser, gotPass)
		}
	}

	addr := testenv.FreeAddr(t)
	c, _ := New(Config{URL: "http://" + addr, Index: "ragent"})
	if _, err := c.KeywordSearch(context.Background(), q); !errors.Is(err, service.ErrSearchUnavailable) {
		t.Errorf("nothing listening: %v", err)
	}
	if err := c.Ping(context.Background()); !errors.Is(err, service.ErrSearchUnavailable) {
		t.Errorf("ping, nothing listening: %v", err)
	}
}

// client returns a client of cfg on a fresh index of the test node,
// deleted when the test ends.
func client(t *testing.T, cfg Config) *Client {
	t.Helper()
	base := testenv.OpenSearchURL(t)
	cfg.URL, cfg.Index = base, "ragent_unit_"+testenv.RandomSuffix()
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		req, _ := http.NewRequest(http.MethodDelete, base+"/"+c.Alias()+"_v*", nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
	})
	if err := c.EnsureIndex(context.Background()); err != nil {
		t.Fatal(err)
	}
	return c
}

func doc(id, docID, kb int64, gen int, terms ...string) service.SearchDoc {
	return service.SearchDoc{ChunkID: service.ID(id), DocumentID: service.ID(docID), KnowledgeBaseID: service.ID(kb),
		Generation: gen, Terms: terms}
}

func ids(rs []service.SearchHit) []int64 {
	out := make([]int64, len(rs))
	for i, r := range rs {
		out[i] = int64(r.ChunkID)
	}
	return out
}

func TestIndexSearchDelete(t *testing.T) {
	c := client(t, Config{K1: 1.2, B: 0.75})
	ctx := context.Background()
	if err := c.EnsureIndex(ctx); err != nil { // idempotent
		t.Fatal(err)
	}
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	err := c.IndexSearchable(ctx, []service.SearchDoc{
		doc(1, 10, 100, 1, "walrus", "ice", "walrus"),
		doc(2, 10, 100, 1, "walrus", "clam", "clam", "clam", "sea", "sea"),
		doc(3, 11, 100, 1, "ice", "floe"),
		doc(4, 12, 200, 1, "walrus", "walrus", "walrus"),
		doc(5, 13, 100, 1, "缓存", "存策", "策略"),
	})
	if err != nil {
		t.Fatal(err)
	}
	search := func(kbs []service.ID, terms ...string) []int64 {
		t.Helper()
		q := service.KeywordQuery{KnowledgeBaseIDs: kbs, Limit: 10}
		for _, t := range terms {
			q.Terms = append(q.Terms, service.TermCount{Term: t, Count: 1})
		}
		rs, err := c.KeywordSearch(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		return ids(rs)
	}
	if got := search([]service.ID{100}, "walrus"); len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("walrus in kb 100: %v (higher tf and shorter chunk first; kb 200 filtered out)", got)
	}
	// A hit carries the document and generation its chunk was indexed
	// under (what a search checks a dropped hit against).
	if rs, err := c.KeywordSearch(ctx, service.KeywordQuery{KnowledgeBaseIDs: []service.ID{100},
		Terms: []service.TermCount{{Term: "floe", Count: 1}}, Limit: 10}); err != nil || len(rs) != 1 ||
		rs[0].ChunkID != 3 || rs[0].DocumentID != 11 || rs[0].Generation != 1 {
		t.Fatalf("hit of floe: %+v %v", rs, err)
	}
	if got := search([]service.ID{100, 200}, "walrus"); len(got) != 3 || got[0] != 4 {
		t.Fatalf("walrus in both: %v", got)
	}
	if got := search([]service.ID{100}, "缓存", "策略"); len(got) != 1 || got[0] != 5 {
		t.Fatalf("bigrams: %v", got)
	}
	if got := search([]service.ID{300}, "walrus"); len(got) != 0 {
		t.Fatalf("unknown kb: %v", got)
	}
	// Keep chunk 2 of document 10, drop the rest of it.
	if err := c.DeleteDocument(ctx, 10, []service.ID{2}); err != nil {
		t.Fatal(err)
	}
	if got := search([]service.ID{100}, "walrus"); len(got) != 1 || got[0] != 2 {
		t.Fatalf("after deleting chunk 1: %v", got)
	}
	if err := c.DeleteDocument(ctx, 10, nil); err != nil {
		t.Fatal(err)
	}
	if got := search([]service.ID{100}, "walrus", "clam"); len(got) != 0 {
		t.Fatalf("after deleting document 10: %v", got)
	}
}

func TestRebuildSwapsAlias(t *testing.T) {
	c := client(t, Config{K1: 1.2, B: 0.75})
	ctx := context.Background()
	if err := c.Index(ctx, []service.SearchDoc{doc(1, 10, 100, 1, "old")}); err != nil {
		t.Fatal(err)
	}
	index, err := c.BeginRebuild(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A change during the rebuild reaches both indexes.
	if err := c.Index(ctx, []service.SearchDoc{doc(2, 11, 100, 1, "during")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Backfill(ctx, index, []service.SearchDoc{doc(1, 10, 100, 1, "old"), doc(3, 12, 100, 1, "gone")}); err != nil {
		t.Fatal(err)
	}
	if err := c.Refresh(ctx, index); err != nil {
		t.Fatal(err)
	}
	got, err := c.ChunkIDs(ctx, index, 0, 10)
	if err != nil || len(got) != 3 {
		t.Fatalf("rebuilt index: %v %v", got, err)
	}
	if err := c.SweepChunks(ctx, index, []service.ID{3}); err != nil {
		t.Fatal(err)
	}
	if err := c.FinishRebuild(ctx, index); err != nil {
		t.Fatal(err)
	}
	live, err := c.aliasIndexes(ctx, c.Alias())
	if err != nil || len(live) != 1 || live[0] != index {
		t.Fatalf("alias now on %v (%v), want %s", live, err, index)
	}
	if next, _ := c.aliasIndexes(ctx, c.nextAlias()); len(next) != 0 {
		t.Fatalf("next alias left on %v", next)
	}
	got, err = c.ChunkIDs(ctx, c.Alias(), 0, 10)
	if err != nil || len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("live after the swap: %v %v", got, err)
	}
	// Writes go to the new index only now.
	if err := c.Index(ctx, []service.SearchDoc{doc(4, 13, 100, 1, "after")}); err != nil {
		t.Fatal(err)
	}
}

func TestVectorSearch(t *testing.T) {
	c := client(t, Config{Vectors: true})
	ctx := context.Background()
	const space, other = "00000000000000aa", "00000000000000bb"
	vec := func(id, kb int64, sp string, v ...float32) service.SearchDoc {
		d := doc(id, id*10, kb, 1, "t")
		d.Space, d.Vector = sp, v
		return d
	}
	// Before any vector of the space exists, nothing matches.
	if got, err := c.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: []service.ID{1}, Space: space, Vector: []float32{1, 0, 0}, Limit: 5}); err != nil || len(got) != 0 {
		t.Fatalf("unknown space: %v %v", got, err)
	}
	err := c.IndexSearchable(ctx, []service.SearchDoc{
		vec(1, 1, space, 1, 0, 0),
		vec(2, 1, space, 0.6, 0.8, 0),
		vec(3, 1, space, 0, 0, 1),
		vec(4, 2, space, 1, 0, 0), // another knowledge base
		vec(5, 1, other, 1, 0),    // another space, another dimension
		doc(6, 60, 1, 1, "t"),     // no vector (written during a re-embedding)
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: []service.ID{1}, Space: space, Vector: []float32{1, 0, 0}, Limit: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].ChunkID != 1 || got[1].ChunkID != 2 {
		t.Fatalf("nearest in kb 1: %+v", got)
	}
	if d0, d1 := got[0].Score-1, got[1].Score-0.6; d0*d0 > 1e-6 || d1*d1 > 1e-6 {
		t.Fatalf("scores %v %v, want the cosines 1 and 0.6", got[0].Score, got[1].Score)
	}
	got, err = c.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: []service.ID{1}, Space: other, Vector: []float32{1, 0}, Limit: 5})
	if err != nil || len(got) != 1 || got[0].ChunkID != 5 {
		t.Fatalf("other space: %+v %v", got, err)
	}
}

// TestVectorSearchDefaultCandidates searches one merged segment of random
// vectors (the hardest case for HNSW: all distances alike) with Limit 1
// and no EfSearch: the engine must search DefaultEfSearch candidates, as
// Postgres does, so every vector finds itself. With a candidate list of
// Limit, the Lucene graph walk misses some.
func TestVectorSearchDefaultCandidates(t *testing.T) {
	c := client(t, Config{Vectors: true})
	ctx := context.Background()
	const space, n, dim = "00000000000000aa", 2000, 48
	rng := rand.New(rand.NewPCG(7, 7))
	docs := make([]service.SearchDoc, n)
	for i := range docs {
		d := doc(int64(i+1), int64(i+1), 1, 1, "t")
		d.Space, d.Vector = space, make([]float32, dim)
		for j := range d.Vector {
			d.Vector[j] = float32(rng.NormFloat64())
		}
		docs[i] = d
	}
	if err := c.IndexSearchable(ctx, docs); err != nil {
		t.Fatal(err)
	}
	if err := c.do(ctx, http.MethodPost, "/"+c.Alias()+"/_forcemerge?max_num_segments=1", nil, nil); err != nil {
		t.Fatal(err)
	}
	var missed []int
	for i, d := range docs[:300] {
		got, err := c.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: []service.ID{1}, Space: space, Vector: d.Vector, Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].ChunkID != d.ChunkID {
			missed = append(missed, i)
		}
	}
	if len(missed) > 0 {
		t.Fatalf("%d of 300 vectors do not find themselves first: %v", len(missed), missed)
	}
}

// bulkRecorder passes requests to the test node and records the bodies of
// the bulk ones; block, when set, holds every bulk request until closed,
// and tooLarge answers 413 to bulk bodies above it (what the node does
// above its http.max_content_length, 100 MB, which a test cannot afford to
// send).
type bulkRecorder struct {
	mu       sync.Mutex
	sizes    []int
	block    chan struct{}
	tooLarge int
}

func (r *bulkRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	if !strings.HasPrefix(req.URL.Path, "/_bulk") {
		return http.DefaultTransport.RoundTrip(req)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.sizes = append(r.sizes, len(body))
	r.mu.Unlock()
	if r.block != nil {
		<-r.block
	}
	if r.tooLarge > 0 && len(body) > r.tooLarge {
		return &http.Response{StatusCode: http.StatusRequestEntityTooLarge, Body: io.NopCloser(strings.NewReader("")),
			Header: http.Header{}, Request: req}, nil
	}
	req.Body = io.NopCloser(bytes.NewReader(body))
	return http.DefaultTransport.RoundTrip(req)
}

func (r *bulkRecorder) requests() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.sizes)
}

// count is the documents the index holds, refreshed first.
func count(t *testing.T, c *Client) int {
	t.Helper()
	ctx := context.Background()
	if err := c.Refresh(ctx, c.Alias()); err != nil {
		t.Fatal(err)
	}
	var out struct{ Count int }
	if err := c.do(ctx, http.MethodGet, "/"+c.Alias()+"/_count", nil, &out); err != nil {
		t.Fatal(err)
	}
	return out.Count
}

// Concurrent writers share bulk requests: while the first two requests are
// held, the other writers queue, and all of them go out in one more.
func TestBulkBatchesConcurrentWriters(t *testing.T) {
	rec := &bulkRecorder{block: make(chan struct{})}
	c := client(t, Config{Client: &http.Client{Transport: rec}})
	const writers = 30
	errs := make(chan error, writers)
	for i := range writers {
		go func() {
			errs <- c.Index(context.Background(), []service.SearchDoc{doc(int64(i+1), int64(i+1), 1, 1, "walrus")})
		}()
	}
	testenv.Eventually(t, 30*time.Second, "writers queued behind the held requests", func() bool {
		c.bulk.mu.Lock()
		defer c.bulk.mu.Unlock()
		return c.bulk.flushing == bulkFlushes && len(c.bulk.queue) == writers-bulkFlushes
	})
	close(rec.block)
	for range writers {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := len(rec.requests()); n != bulkFlushes+1 {
		t.Errorf("%d bulk requests for %d writers, want %d", n, writers, bulkFlushes+1)
	}
	if n := count(t, c); n != writers {
		t.Errorf("index holds %d chunks, want %d", n, writers)
	}
}

// A write larger than the byte cap goes out in several requests under it;
// one OpenSearch refuses as too large is split until it fits, and a single
// chunk it refuses fails permanently instead of being retried forever.
func TestBulkSplitsLargeWrites(t *testing.T) {
	rec := &bulkRecorder{}
	c := client(t, Config{MaxBulkBytes: 16 << 10, Client: &http.Client{Transport: rec}})
	ctx := context.Background()
	docs := make([]service.SearchDoc, 400)
	for i := range docs {
		docs[i] = doc(int64(i+1), 1, 1, 1, strings.Fields(strings.Repeat("walrus ", 20))...)
	}
	if err := c.Index(ctx, docs); err != nil {
		t.Fatal(err)
	}
	sizes := rec.requests()
	if len(sizes) < 4 || slices.Max(sizes) > 16<<10 {
		t.Errorf("bulk request sizes %v, want several under %d bytes", sizes, 16<<10)
	}
	if n := count(t, c); n != len(docs) {
		t.Errorf("index holds %d chunks, want %d", n, len(docs))
	}

	// The cluster refuses bodies over 8 KB; ragent's cap is above that.
	rec = &bulkRecorder{tooLarge: 8 << 10}
	c = client(t, Config{Client: &http.Client{Transport: rec}})
	if err := c.Index(ctx, docs); err != nil {
		t.Fatalf("split after 413: %v", err)
	}
	if n := count(t, c); n != len(docs) {
		t.Errorf("index holds %d chunks after the 413 splits, want %d", n, len(docs))
	}
	huge := doc(1000, 2, 1, 1, strings.Fields(strings.Repeat("walrus ", 2000))...)
	err := c.Index(ctx, []service.SearchDoc{doc(999, 2, 1, 1, "small"), huge})
	if !errors.Is(err, service.ErrPermanent) || !errors.Is(err, service.ErrTooLarge) {
		t.Fatalf("a chunk over the cluster's limit: %v, want a permanent too-large error", err)
	}
}

// requestLog passes requests to the test node and records their method
// and path; before, when set, runs first (outside the log) on each bulk
// request.
type requestLog struct {
	mu     sync.Mutex
	reqs   []string
	before func(req *http.Request)
}

func (l *requestLog) RoundTrip(req *http.Request) (*http.Response, error) {
	l.mu.Lock()
	l.reqs = append(l.reqs, req.Method+" "+req.URL.Path)
	before := l.before
	l.mu.Unlock()
	if before != nil && req.URL.Path == "/_bulk" {
		before(req)
	}
	return http.DefaultTransport.RoundTrip(req)
}

func (l *requestLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.reqs
	l.reqs = nil
	return out
}

// A write is one bulk request, with no lookup of the aliases before it;
// while a rebuild runs it is two (live, then next), and a rebuild that
// finishes between the two is caught: the write reaches the index that is
// live afterwards.
func TestWriteRoundTrips(t *testing.T) {
	log := &requestLog{}
	c := client(t, Config{Client: &http.Client{Transport: log}})
	ctx := context.Background()
	log.take()
	if err := c.Index(ctx, []service.SearchDoc{doc(1, 10, 100, 1, "walrus")}); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); !slices.Equal(got, []string{"POST /_bulk"}) {
		t.Errorf("a write sent %v, want one bulk request", got)
	}
	if err := c.DeleteChunks(ctx, []service.ID{1}); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); !slices.Equal(got, []string{"POST /_bulk"}) {
		t.Errorf("a delete sent %v, want one bulk request", got)
	}

	index, err := c.BeginRebuild(ctx)
	if err != nil {
		t.Fatal(err)
	}
	log.take()
	if err := c.Index(ctx, []service.SearchDoc{doc(2, 11, 100, 1, "during")}); err != nil {
		t.Fatal(err)
	}
	if got := log.take(); !slices.Equal(got, []string{"POST /_bulk", "POST /_bulk"}) {
		t.Errorf("a write during a rebuild sent %v, want two bulk requests", got)
	}
	// The rebuild finishes after the live index took the write and
	// before the next one does.
	bulks := 0
	log.mu.Lock()
	log.before = func(req *http.Request) {
		if bulks++; bulks == 2 {
			if err := c.FinishRebuild(ctx, index); err != nil {
				t.Error(err)
			}
		}
	}
	log.mu.Unlock()
	if err := c.Index(ctx, []service.SearchDoc{doc(3, 12, 100, 1, "raced")}); err != nil {
		t.Fatal(err)
	}
	log.mu.Lock()
	log.before = nil
	log.mu.Unlock()
	if err := c.Refresh(ctx, c.Alias()); err != nil {
		t.Fatal(err)
	}
	got, err := c.ChunkIDs(ctx, c.Alias(), 0, 10)
	if err != nil || !slices.Equal(got, []service.ID{2, 3}) {
		t.Fatalf("the rebuilt live index holds %v (%v), want [2 3]", got, err)
	}
	live, err := c.aliasIndexes(ctx, c.Alias())
	if err != nil || len(live) != 1 || live[0] != index {
		t.Fatalf("alias on %v (%v), want %s", live, err, index)
	}
}
