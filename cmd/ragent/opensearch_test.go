package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/mq/redisstream"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/ingest"
	"github.com/ragent-go/ragent/service/retrieve"
	"github.com/ragent-go/ragent/text"
)

// TestOpenSearchDownLosesNothing cuts OpenSearch away (a proxy in front of
// the shared node) while a document is ingested: its chunks reach Postgres,
// it stays running, search answers 503 rather than nothing, and the
// search-index message is dead-lettered after its retries. Once OpenSearch
// is back the reaper's re-queue makes the document ready and searchable.
func TestOpenSearchDownLosesNothing(t *testing.T) {
	u, err := url.Parse(testenv.OpenSearchURL(t))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	cfg := openSearchConfig(t, proxy.Addr())
	cfg.MQVisibilityTimeout = time.Second // quick redeliveries, so the message is dead-lettered soon
	in, c, kb := ingestEnv(t, cfg)
	ctx := context.Background()

	proxy.Down()
	d := c.uploadAccepted(kb, "walrus.txt", []byte("The walrus lives on Arctic ice floes and eats clams."))
	testenv.Eventually(t, 60*time.Second, "chunks in Postgres", func() bool {
		got := c.document(d.ID)
		if got.Status == "ready" || got.Status == "failed" {
			t.Fatalf("document %s while OpenSearch is down", got.Status)
		}
		return got.ChunkCount > 0
	})
	r := c.do("POST", "/api/v1/search", map[string]any{"query": "walrus", "knowledgeBaseIds": []string{kb}, "mode": "keyword"})
	if r.Status != http.StatusServiceUnavailable || r.errorCode(t) != "search_unavailable" {
		t.Fatalf("search while OpenSearch is down: %d %s", r.Status, r.Body)
	}
	if resp, err := http.Get(in.url + "/readyz"); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("readyz while OpenSearch is down: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	rdb := testenv.Redis(t)
	dead := redisstream.DeadKey(cfg.RedisPrefix, service.SearchIndexTopic)
	testenv.Eventually(t, 120*time.Second, "the search-index message dead-lettered", func() bool {
		n, err := rdb.XLen(ctx, dead).Result()
		return err == nil && n > 0
	})
	if got := c.document(d.ID); got.Status != "running" {
		t.Fatalf("document %s after the message was dead-lettered", got.Status)
	}

	proxy.Up()
	// The reaper re-queues a copy behind for RunningTimeout (15 min); the
	// test moves the cutoff instead of waiting.
	n, err := in.app.store.RequeueSearchIndex(ctx, time.Now().Add(time.Minute), 100)
	if err != nil || n != 1 {
		t.Fatalf("requeue: %d %v", n, err)
	}
	c.waitReady(d.ID)
	if !hasDocument(c.search(kb, "walrus clams", "keyword"), d.ID) {
		t.Fatal("document not searchable after OpenSearch came back")
	}
}

// TestSearchConsistencyUnderReindex re-uploads, reindexes and deletes
// documents while ragent reindex-search rebuilds the index again and again
// and searches run: no search returns a document deleted before it started,
// every document ends ready, and the final index holds exactly Postgres's
// chunks (nothing superseded or deleted left behind, nothing missing).
func TestSearchConsistencyUnderReindex(t *testing.T) {
	cfg := openSearchConfig(t, "")
	in, c, kb := ingestEnv(t, cfg)
	osc := openSearchClient(t, cfg)
	ctx := context.Background()

	const n = 12
	docs := make([]docJSON, n)
	for i := range docs {
		docs[i] = c.uploadAccepted(kb, fmt.Sprintf("doc%d.txt", i),
			[]byte(fmt.Sprintf("Zebra report %d: the herd crossed river number %d at dawn.", i, i)))
	}
	for _, d := range docs {
		c.waitReady(d.ID)
	}

	var deleted sync.Map // document id → deleted before a search started
	stopSearch := make(chan struct{})
	var wg sync.WaitGroup
	searchErr := make(chan error, 1)
	wg.Go(func() {
		sc := &client{t: t, base: c.base, token: c.token}
		for {
			select {
			case <-stopSearch:
				return
			default:
			}
			var gone []string
			deleted.Range(func(k, _ any) bool { gone = append(gone, k.(string)); return true })
			r := sc.do("POST", "/api/v1/search", map[string]any{"query": "zebra herd river", "knowledgeBaseIds": []string{kb}, "mode": "keyword", "topK": 50})
			if r.Status != http.StatusOK {
				searchErr <- fmt.Errorf("search: %d %s", r.Status, r.Body)
				return
			}
			var out struct{ Results []searchHit }
			r.json(t, &out)
			for _, id := range gone {
				if hasDocument(out.Results, id) {
					searchErr <- fmt.Errorf("search found deleted document %s", id)
					return
				}
			}
		}
	})

	// Rebuilds run back to back while the documents change, at least two.
	mutated := make(chan struct{})
	rebuilt := make(chan error, 1)
	go func() {
		for i := 0; ; i++ {
			select {
			case <-mutated:
				if i >= 2 {
					rebuilt <- nil
					return
				}
			default:
			}
			if _, err := ingest.RebuildSearchIndex(ctx, in.app.store, osc, testLogger(t)); err != nil {
				rebuilt <- err
				return
			}
		}
	}()
	for i, d := range docs {
		switch i % 3 {
		case 0: // a new generation
			if r := c.do("POST", "/api/v1/documents/"+d.ID+"/reindex", nil); r.Status != http.StatusAccepted {
				t.Fatalf("reindex: %d %s", r.Status, r.Body)
			}
		case 1: // deleted
			if r := c.do("DELETE", "/api/v1/documents/"+d.ID, nil); r.Status != http.StatusNoContent {
				t.Fatalf("delete: %d %s", r.Status, r.Body)
			}
			deleted.Store(d.ID, true)
		case 2: // another document arrives
			docs = append(docs, c.uploadAccepted(kb, fmt.Sprintf("late%d.txt", i),
				[]byte(fmt.Sprintf("Zebra late report %d: the herd rested by river %d.", i, i))))
		}
	}
	close(mutated)
	if err := <-rebuilt; err != nil {
		t.Fatalf("reindex-search: %v", err)
	}
	for i, d := range docs {
		if i < n && i%3 == 1 {
			continue
		}
		c.waitReady(d.ID)
	}
	waitIndexMatches(t, in, osc)
	close(stopSearch)
	wg.Wait()
	select {
	case err := <-searchErr:
		t.Fatal(err)
	default:
	}
}

// TestReindexSearchCommand runs `ragent reindex-search` on a live index and
// on an empty cluster: the documents stay searchable through the new index.
func TestReindexSearchCommand(t *testing.T) {
	cfg := openSearchConfig(t, "")
	_, c, kb := ingestEnv(t, cfg)
	d := c.uploadAccepted(kb, "walrus.txt", []byte("The walrus lives on Arctic ice floes and eats clams."))
	c.waitReady(d.ID)
	var out strings.Builder
	if err := reindexSearchCommand(context.Background(), cfg, testLogger(t), &out); err != nil {
		t.Fatal(err)
	}
	if want := "reindexed 1 chunks into " + cfg.OpenSearchIndex; !strings.Contains(out.String(), want) {
		t.Fatalf("output %q lacks %q", out.String(), want)
	}
	if !hasDocument(c.search(kb, "walrus clams", "keyword"), d.ID) {
		t.Fatal("not found after the rebuild")
	}
	// A cluster that lost its index (a new cluster): the command creates it.
	req, _ := http.NewRequest(http.MethodDelete, testenv.OpenSearchURL(t)+"/"+cfg.OpenSearchIndex+"_v*", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if r := c.do("POST", "/api/v1/search", map[string]any{"query": "walrus", "knowledgeBaseIds": []string{kb}}); r.Status != http.StatusServiceUnavailable {
		t.Fatalf("search without an index: %d %s", r.Status, r.Body)
	}
	if err := reindexSearchCommand(context.Background(), cfg, testLogger(t), &out); err != nil {
		t.Fatal(err)
	}
	if !hasDocument(c.search(kb, "walrus clams", "keyword"), d.ID) {
		t.Fatal("not found after rebuilding a lost index")
	}
}

// TestReembedReachesOpenSearchVectors changes the embedding model with
// vectors in OpenSearch: after the knowledge base switches spaces, vector
// search (in OpenSearch, in the new space) finds its documents.
func TestReembedReachesOpenSearchVectors(t *testing.T) {
	const dim, docs = 64, 4
	fake := newFakeEmbedServer(t, dim)
	cfg := openSearchConfig(t, "")
	cfg.OpenSearchVectors, cfg.EmbedDim = true, dim
	a := start(t, cfg)
	ca := a.adminClient(t)
	kb := ca.createKB("reembedded")
	ids := ca.uploadReady(kb, "d", docs, func(i int) string {
		return fmt.Sprintf("Notebook %d covers topic%d: the migration of the %d-th flock.", i, i, i)
	})
	if !hasDocument(ca.search(kb, "query topic2", "vector"), ids[2]) {
		t.Fatal("offline vector search does not find the document")
	}
	a.stop()

	next := cfg
	next.EmbedProvider, next.EmbedModel, next.EmbedBaseURL = "openai", "fake-model", fake.URL()
	b := start(t, next)
	cb := b.adminClient(t)
	cb.waitKB(kb, 90*time.Second, "the switch", func(p kbProgress) bool { return p.Reembedding == nil && p.EmbeddingModel == "fake-model" })
	space := service.EmbeddingSpace{Model: "fake-model", Dim: dim}.Key()
	kbID, _ := service.ParseID(kb)
	osc := openSearchClient(t, next)
	testenv.Eventually(t, 60*time.Second, "every chunk's vector in the new space in OpenSearch", func() bool {
		st, err := b.app.store.DocumentSearchState(context.Background(), mustID(t, ids[docs-1]))
		if err != nil || len(st.Chunks) == 0 || st.Chunks[0].EmbeddingSpace != space {
			return false
		}
		found, err := osc.VectorSearch(context.Background(), service.VectorQuery{KnowledgeBaseIDs: []service.ID{kbID}, Space: space,
			Vector: st.Chunks[0].Embedding, Limit: 10})
		return err == nil && len(found) == docs
	})
	if !hasDocument(cb.search(kb, "query topic2", "vector"), ids[2]) {
		t.Fatal("vector search in the new space does not find the document")
	}
	waitIndexMatches(t, b, osc)
}

func mustID(t *testing.T, s string) service.ID {
	t.Helper()
	id, err := service.ParseID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestOpenSearchConcurrentStartOneIndex starts instances together on a
// fresh index name: they create the index under the startup lock, so
// exactly one physical index exists, with the alias on it.
func TestOpenSearchConcurrentStartOneIndex(t *testing.T) {
	cfg := openSearchConfig(t, "")
	const n = 4
	errs := make(chan error, n)
	for range n {
		go func() {
			app, err := newApp(context.Background(), cfg, testLogger(t))
			if err == nil {
				t.Cleanup(func() { app.Close(context.Background()) })
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	base := strings.TrimRight(cfg.OpenSearchURL, "/")
	var indexes []struct{ Index string }
	getOpenSearch(t, base+"/_cat/indices/"+cfg.OpenSearchIndex+"_v*?format=json", &indexes)
	var aliases map[string]any
	getOpenSearch(t, base+"/_alias/"+cfg.OpenSearchIndex, &aliases)
	if len(indexes) != 1 || len(aliases) != 1 || aliases[indexes[0].Index] == nil {
		t.Fatalf("%d instances made indexes %v with the alias on %v, want one index holding it", n, indexes, aliases)
	}
}

func getOpenSearch(t *testing.T, url string, out any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatalf("%s: %v", url, err)
	}
}

// gapEngine is OpenSearch with between run once, right after its first
// answer and before the caller reads the hits' rows from Postgres.
type gapEngine struct {
	searchEngine
	calls   atomic.Int32
	between func()
}

func (e *gapEngine) KeywordSearch(ctx context.Context, q service.KeywordQuery) ([]service.SearchHit, error) {
	hits, err := e.searchEngine.KeywordSearch(ctx, q)
	if e.calls.Add(1) == 1 {
		e.between()
	}
	return hits, err
}

func (e *gapEngine) VectorSearch(ctx context.Context, q service.VectorQuery) ([]service.SearchHit, error) {
	hits, err := e.searchEngine.VectorSearch(ctx, q)
	if e.calls.Add(1) == 1 {
		e.between()
	}
	return hits, err
}

// TestOpenSearchReplaceBetweenReads forces the gap every search on the
// OpenSearch backend has between OpenSearch's answer (chunk ids) and
// Postgres's rows: a replacement commits right there, so Postgres no longer
// has the old chunk OpenSearch answered with, and the answer predates the
// new one. The search must still find the document, in its new version,
// not in neither (TestPipelineReplaceByExternalID/opensearch failed now and
// then on this gap: 2 of 65 searches found nothing).
func TestOpenSearchReplaceBetweenReads(t *testing.T) {
	for _, vectors := range []bool{false, true} {
		t.Run(fmt.Sprintf("vectors=%t", vectors), func(t *testing.T) {
			cfg := openSearchConfig(t, "")
			cfg.OpenSearchVectors = vectors
			in, c, kb := ingestEnv(t, cfg)
			ctx := context.Background()
			version := func(n string) []byte {
				return []byte("Quokka memo version " + n + ": the zorbulon threshold is set by the " + n + " committee.")
			}
			r := c.uploadExternal(kb, "memo", "memo.txt", version("ONE"))
			var d pipelineDoc
			r.json(t, &d)
			c.waitReady(d.ID)
			docID, _ := service.ParseID(d.ID)
			kbID, _ := service.ParseID(kb)
			st, err := in.app.store.DocumentSearchState(ctx, docID)
			if err != nil || len(st.Chunks) != 1 {
				t.Fatalf("state: %+v %v", st, err)
			}

			engine := &gapEngine{searchEngine: openSearchClient(t, cfg), between: func() {
				r := c.uploadExternal(kb, "memo", "memo-v2.txt", version("TWO"))
				if r.Status != http.StatusAccepted {
					t.Errorf("second upload: %d %s", r.Status, r.Body)
					return
				}
				c.waitReady(d.ID)
			}}
			store := openSearchStore{Store: in.app.store, os: engine}
			var res []service.SearchResult
			if vectors {
				res, err = store.VectorSearch(ctx, service.VectorQuery{KnowledgeBaseIDs: []service.ID{kbID},
					Space: st.Chunks[0].EmbeddingSpace, Vector: st.Chunks[0].Embedding, Limit: 10})
			} else {
				res, err = store.KeywordSearch(ctx, service.KeywordQuery{KnowledgeBaseIDs: []service.ID{kbID},
					Terms: retrieve.TermCounts(text.Tokenize("zorbulon threshold")), K1: 0.9, B: 0.4, Limit: 10})
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(res) != 1 || res[0].DocumentID != docID || !strings.Contains(res[0].Content, "version TWO") {
				t.Fatalf("a search across the replace's commit found %+v, want the new version", res)
			}
			if n := engine.calls.Load(); n != 2 {
				t.Fatalf("OpenSearch asked %d times, want twice (once more after the commit)", n)
			}
		})
	}
}
