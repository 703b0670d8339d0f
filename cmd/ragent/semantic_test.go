package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/text"
)

// localEmbedderConfig is testConfig configured as `make run` configures
// ragent when the local embedding model is up (scripts/services.sh prints
// these settings), through the same loader, so the defaults that depend on
// the embedder (fusion weight, relevance gate) are the real ones.
func localEmbedderConfig(t *testing.T) Config {
	t.Helper()
	base := testConfig(t)
	env := map[string]string{
		"RAGENT_DATABASE_URL":         base.DatabaseURL,
		"RAGENT_REDIS_URL":            base.RedisURL,
		"RAGENT_REDIS_PREFIX":         base.RedisPrefix,
		"RAGENT_ADMIN_PASSWORD":       "admin-password",
		"RAGENT_DEMO":                 "true",
		"RAGENT_HTTP_ADDR":            "127.0.0.1:0",
		"RAGENT_LOG_LEVEL":            "warn",
		"RAGENT_CHAT_RATE_PER_MINUTE": "0",
		"RAGENT_EMBEDDING_PROVIDER":   "openai",
		"RAGENT_EMBEDDING_BASE_URL":   testenv.EmbedderURL(t),
		"RAGENT_EMBEDDING_MODEL":      testenv.EmbedderModel,
		"RAGENT_EMBEDDING_DIM":        "384",
	}
	cfg, err := loadConfig(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestParaphraseFindsDemoDocument is the promise of `make run`: with the
// local embedding model, a question that shares no word with a demo
// document — after the tokenizer BM25 uses: stop words dropped, stemmed —
// finds it, in /search and as the first source of a chat answer.
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

	a := start(t, localEmbedderConfig(t))
	c := a.client(t, a.login(t, "admin", "admin-password"))
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

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, events := c.chatStream(ctx, map[string]any{"question": question}, nil)
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
