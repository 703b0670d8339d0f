package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/llm"
	"github.com/ragent-go/ragent/ratelimit"
	"github.com/ragent-go/ragent/service"
)

// kbProgress is the re-embedding state of a knowledge base as the API
// returns it.
type kbProgress struct {
	EmbeddingModel string `json:"embeddingModel"`
	EmbeddingDim   int    `json:"embeddingDim"`
	Reembedding    *struct {
		Target struct {
			Model string `json:"model"`
		} `json:"target"`
		Done  int `json:"done"`
		Total int `json:"total"`
	} `json:"reembedding"`
}

func (c *client) kbProgress(kbID string) kbProgress {
	c.t.Helper()
	return getJSON[kbProgress](c, "/api/v1/knowledge-bases/"+kbID)
}

// waitKB polls a knowledge base until ok accepts it.
func (c *client) waitKB(kbID string, timeout time.Duration, what string, ok func(kbProgress) bool) kbProgress {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		kb := c.kbProgress(kbID)
		if ok(kb) {
			return kb
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("knowledge base %s: %s not reached in %s: %+v", kbID, what, timeout, kb)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func queryDB[T any](t *testing.T, dbURL, sql string, args ...any) T {
	t.Helper()
	ctx := context.Background()
	conn := connectDB(t, dbURL)
	var v T
	if err := conn.QueryRow(ctx, sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// uploadReady uploads n documents, prefix0.txt … with text(i) as the i-th
// one's content, and returns their ids once all are ready. Every upload
// goes in before the first wait, so they are ingested side by side.
func (c *client) uploadReady(kb, prefix string, n int, text func(i int) string) []string {
	c.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = c.uploadAccepted(kb, fmt.Sprintf("%s%d.txt", prefix, i), []byte(text(i))).ID
	}
	for _, id := range ids {
		c.waitReady(id)
	}
	return ids
}

// reembedSetup is a model server of dim dimensions and a configuration
// whose first lifetime embeds offline at that dimension.
func reembedSetup(t *testing.T, dim int) (*fakeEmbedServer, Config) {
	fake := newFakeEmbedServer(t, dim)
	cfg := testConfig(t)
	cfg.EmbedDim = dim
	cfg.MQVisibilityTimeout = 2 * time.Second
	return fake, cfg
}

// TestReembedOnModelChange changes the embedding model between two
// lifetimes of the app (offline hashing → an OpenAI-compatible model of the
// same dimension, so only the space key keeps them apart): the knowledge
// base is re-embedded in the background through the MQ while search keeps
// working, keyword and vector in the knowledge base's own space; a second
// instance starting meanwhile plans nothing twice; the instances stop
// mid-re-embedding and a new one finishes it without redoing documents
// that were done; afterwards no chunk has a vector of the old space.
func TestReembedOnModelChange(t *testing.T) {
	const dim, docs = 64, 8
	fake, cfg := reembedSetup(t, dim)
	cfg.InstanceID = "first"

	// Lifetime 1: the offline embedder.
	a := start(t, cfg)
	ca := a.adminClient(t)
	kb := ca.createKB("reembedded")
	text := func(i int) string {
		return fmt.Sprintf("Notebook %d covers topic%d: the migration of the %d-th flock over the northern lakes.", i, i, i)
	}
	ids := ca.uploadReady(kb, "d", docs, text)
	if !hasDocument(ca.search(kb, "query topic5", "vector"), ids[5]) {
		t.Fatal("offline vector search does not find the document")
	}
	a.stop()

	// Lifetime 2: another model of the same dimension. Three documents are
	// re-embedded, then the model server holds every call.
	next := cfg
	next.EmbedProvider, next.EmbedModel, next.EmbedBaseURL, next.InstanceID = "openai", "fake-model", fake.URL(), "second"
	fake.holdAfter(3)
	b := start(t, next)
	cb := b.adminClient(t)
	got := cb.waitKB(kb, 60*time.Second, "3 documents re-embedded", func(p kbProgress) bool {
		return p.Reembedding != nil && p.Reembedding.Done == 3
	})
	if got.Reembedding.Total != docs || got.Reembedding.Target.Model != "fake-model" || got.EmbeddingModel != llm.OfflineEmbeddingModel {
		t.Fatalf("progress %+v", got)
	}
	// Search meanwhile: keyword, and vector in the recorded (offline) space.
	if !hasDocument(cb.search(kb, "query topic5", "keyword"), ids[5]) {
		t.Fatal("keyword search lost the document during re-embedding")
	}
	if !hasDocument(cb.search(kb, "query topic5", "vector"), ids[5]) {
		t.Fatal("vector search in the knowledge base's own space lost the document during re-embedding")
	}
	if n := fake.queryCalls.Load(); n != 0 {
		t.Fatalf("%d queries embedded by the new model before the switch", n)
	}

	// A second instance with the same configuration plans nothing again.
	other := next
	other.InstanceID = "second-b"
	b2 := start(t, other)
	if p := cb.kbProgress(kb); p.Reembedding == nil || p.Reembedding.Done < 3 {
		t.Fatalf("a second instance reset the progress: %+v", p)
	}
	if n := queryDB[int64](t, cfg.DatabaseURL, `SELECT count(*) FROM outbox WHERE key LIKE '%:reembed:%'`); n != docs {
		t.Fatalf("%d re-embedding messages, want one per document (%d)", n, docs)
	}

	// Both stop while calls are held (a crash mid-re-embedding).
	space := service.EmbeddingSpace{Model: "fake-model", Dim: dim}.Key()
	doneRows := queryDB[[]int64](t, cfg.DatabaseURL, `SELECT coalesce(array_agg(id), '{}') FROM documents WHERE reembedded_space = $1`, space)
	b.stop()
	b2.stop()
	fake.release()

	// Lifetime 3 resumes and finishes.
	last := next
	last.InstanceID = "third"
	c := start(t, last)
	cc := c.adminClient(t)
	got = cc.waitKB(kb, 90*time.Second, "the switch", func(p kbProgress) bool { return p.Reembedding == nil })
	if got.EmbeddingModel != "fake-model" || got.EmbeddingDim != dim {
		t.Fatalf("after the switch: %+v", got)
	}
	if n := queryDB[int64](t, cfg.DatabaseURL, `SELECT count(*) FROM chunks WHERE embedding_space <> $1 OR embedding IS NULL
		OR next_embedding IS NOT NULL`, space); n != 0 {
		t.Fatalf("%d chunks not (only) in the new space", n)
	}
	if n := queryDB[int64](t, cfg.DatabaseURL, `SELECT count(*) FROM chunks`); n < docs {
		t.Fatalf("%d chunks", n)
	}
	for _, id := range doneRows {
		for i, doc := range ids {
			if doc == fmt.Sprint(id) && fake.embedded("fake-model", text(i)) != 1 {
				t.Fatalf("document %s was done before the stop but embedded %d times", doc, fake.embedded("fake-model", text(i)))
			}
		}
	}
	if len(doneRows) != 3 {
		t.Fatalf("%d documents done before the stop, want 3", len(doneRows))
	}
	if !hasDocument(cc.search(kb, "query topic5", "vector"), ids[5]) || fake.queryCalls.Load() == 0 {
		t.Fatal("vector search in the new space does not find the document")
	}
	if !hasDocument(cc.search(kb, "query topic6", "keyword"), ids[6]) {
		t.Fatal("keyword search lost the document")
	}
}

// TestReembedTakesTheDocumentLane: re-embedding after a model change takes
// its place in the embedding queue as an upload's batches do. With one of
// two embedding slots for documents and the model server holding every
// document call, the re-embedding's next batches wait in the "embed"
// limiter's queue in the lane of their knowledge base and uploader; a
// search's query embedding (in a knowledge base of the new space) is served
// meanwhile, ahead of them; and every re-embedding call spends the
// embedding budget.
func TestReembedTakesTheDocumentLane(t *testing.T) {
	const docs = 4
	fake, cfg := reembedSetup(t, 32)
	a := start(t, cfg)
	ca := a.adminClient(t)
	kb := ca.createKB("moving")
	ca.uploadReady(kb, "m", docs, func(i int) string { return fmt.Sprintf("Logbook %d of voyage%d along the coast.", i, i) })
	a.stop()

	next := cfg
	next.EmbedProvider, next.EmbedModel, next.EmbedBaseURL = "openai", "fake-model", fake.URL()
	next.EmbedConcurrency, next.EmbedRequestsPerMinute = 2, 1000
	fake.holdAfter(0)
	b := start(t, next)
	cb := b.adminClient(t)
	rdb := testRedis(t, next)
	ctx := context.Background()
	queue, owners := next.RedisPrefix+"{limiter:embed}:queue", next.RedisPrefix+"{limiter:embed}:owners"
	testenv.Eventually(t, 60*time.Second, "a re-embedding call held and more queued", func() bool {
		return fake.docInFlight.Load() == 1 && rdb.ZCard(ctx, queue).Val() > 0
	})
	for _, id := range rdb.ZRange(ctx, queue, 0, -1).Val() {
		if lane := rdb.HGet(ctx, owners, id).Val(); !strings.HasPrefix(lane, "documents:"+kb+":") {
			t.Fatalf("a queued embedding call is in lane %q, want the knowledge base's documents:%s:<uploader>", lane, kb)
		}
	}
	fresh := cb.createKB("new space")
	if r := cb.do("POST", "/api/v1/search", map[string]any{"query": "query voyage2 coast", "knowledgeBaseIds": []string{fresh}, "mode": "hybrid"}); r.Status != http.StatusOK {
		t.Fatalf("search during the re-embedding: %d %s", r.Status, r.Body)
	}
	if q := fake.queryCalls.Load(); q != 1 {
		t.Fatalf("%d query calls while re-embedding batches queued, want the query served ahead of them", q)
	}
	fake.release()
	cb.waitKB(kb, 90*time.Second, "the switch", func(p kbProgress) bool { return p.Reembedding == nil })
	l := ratelimit.New(rdb, next.RedisPrefix, "embed", ratelimit.Config{Budget: ratelimit.Budget{Requests: next.EmbedRequestsPerMinute}})
	st, err := l.BudgetStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if calls := int(fake.docCalls.Load() + fake.queryCalls.Load()); st.Requests < calls {
		t.Fatalf("the embedding budget counts %d requests for %d calls: re-embedding went around it", st.Requests, calls)
	}
}
