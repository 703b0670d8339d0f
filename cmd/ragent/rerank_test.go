package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"sync/atomic"
	"testing"
)

// TestSearchRerank runs POST /api/v1/search with a reranker: a fake /rerank
// endpoint that scores each passage by the number it names, minus 22, so it
// reverses the order and scores most passages below zero. The search returns
// the reranker's order with its scores, as many results as topK asks (more
// than the 20 reranked by default), negative scores included; an instance
// with RAGENT_RERANK_MIN_SCORE drops those below it.
func TestSearchRerank(t *testing.T) {
	var calls, lastDocs atomic.Int64
	number := regexp.MustCompile(`item(\d+)`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model     string   `json:"model"`
			Query     string   `json:"query"`
			Documents []string `json:"documents"`
			TopN      int      `json:"top_n"`
		}
		if r.URL.Path != "/rerank" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Model != "test-rerank" {
			http.Error(w, "bad rerank request", http.StatusBadRequest)
			return
		}
		calls.Add(1)
		lastDocs.Store(int64(len(req.Documents)))
		type result struct {
			Index int     `json:"index"`
			Score float64 `json:"relevance_score"`
		}
		var out []result
		for i, d := range req.Documents {
			m := number.FindStringSubmatch(d)
			if m == nil {
				continue
			}
			n, _ := strconv.Atoi(m[1])
			out = append(out, result{i, float64(n - 22)})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"results": out})
	}))
	t.Cleanup(srv.Close)

	cfg := testConfig(t)
	cfg.RerankModel, cfg.RerankBaseURL = "test-rerank", srv.URL
	in := start(t, cfg)
	admin := in.login(t, "admin", "admin-password")
	c := in.client(t, admin)
	kb := c.createKB("rerank")
	const docs = 25
	var ids []string
	for i := range docs {
		ids = append(ids, c.uploadAccepted(kb, fmt.Sprintf("w%02d.md", i), fmt.Appendf(nil, "Widget manual page item%d.\n", i)).ID)
	}
	for _, id := range ids {
		c.waitReady(id)
	}

	type hit struct {
		Content string  `json:"content"`
		Score   float64 `json:"score"`
	}
	search := func(c *client, topK int) []hit {
		t.Helper()
		r := c.do("POST", "/api/v1/search", map[string]any{"query": "widget manual", "knowledgeBaseIds": []string{kb}, "mode": "keyword", "topK": topK})
		if r.Status != http.StatusOK {
			t.Fatalf("search: %d %s", r.Status, r.Body)
		}
		var out struct{ Results []hit }
		r.json(t, &out)
		return out.Results
	}
	check := func(hits []hit, want int) {
		t.Helper()
		if len(hits) != want {
			t.Fatalf("%d results, want %d: %v", len(hits), want, hits)
		}
		for i, h := range hits {
			n := docs - 1 - i // the reranker's order: highest number first
			if !regexp.MustCompile(fmt.Sprintf(`\bitem%d\b`, n)).MatchString(h.Content) || h.Score != float64(n-22) {
				t.Fatalf("result %d is %q scored %g, want item%d scored %d", i, h.Content, h.Score, n, n-22)
			}
		}
	}
	check(search(c, 30), docs)
	if calls.Load() == 0 || lastDocs.Load() != docs {
		t.Fatalf("the reranker saw %d documents in %d calls, want all %d", lastDocs.Load(), calls.Load(), docs)
	}
	// A small topK still reranks the default 20 fused results and keeps the
	// best of them.
	top := search(c, 3)
	if len(top) != 3 || lastDocs.Load() != 20 {
		t.Fatalf("topK 3: %d results from %d reranked, want 3 from 20", len(top), lastDocs.Load())
	}
	for i := 1; i < len(top); i++ {
		if top[i].Score > top[i-1].Score {
			t.Fatalf("topK 3: not in the reranker's order: %v", top)
		}
	}

	// A minimum: only items scoring -5 or more (item17 … item24) are kept.
	minimum := -5.0
	cfg.RerankMinScore = &minimum
	gated := start(t, cfg)
	check(search(gated.client(t, gated.login(t, "admin", "admin-password")), 30), 8)
}
