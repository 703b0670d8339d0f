package main

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/opensearch"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/retrieve"
	"github.com/ragent-go/ragent/text"
)

// The retrieval suite runs once per search backend: every test in it takes
// the backend's configuration from forEachBackend, so Postgres and
// OpenSearch answer the same questions the same way.

// forEachBackend runs f as one subtest per search backend: Postgres,
// OpenSearch for keyword search, and OpenSearch for both searches.
func forEachBackend(t *testing.T, f func(t *testing.T, cfg Config)) {
	t.Run("postgres", func(t *testing.T) { f(t, testConfig(t)) })
	t.Run("opensearch", func(t *testing.T) { f(t, openSearchConfig(t, "")) })
	t.Run("opensearch-vectors", func(t *testing.T) {
		cfg := openSearchConfig(t, "")
		cfg.OpenSearchVectors = true
		f(t, cfg)
	})
}

// openSearchConfig is testConfig on the OpenSearch backend with an index of
// its own, deleted when the test ends; through, when set, replaces the
// node's address (a testenv.Proxy in front of it).
func openSearchConfig(t testing.TB, through string) Config {
	t.Helper()
	cfg := testConfig(t)
	base := testenv.OpenSearchURL(t)
	cfg.SearchBackend, cfg.OpenSearchIndex = "opensearch", "ragent_test_"+testenv.RandomSuffix()
	cfg.OpenSearchURL = base
	if through != "" {
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		u.Host = through
		cfg.OpenSearchURL = u.String()
	}
	t.Cleanup(func() {
		for _, pattern := range []string{cfg.OpenSearchIndex + "_v*"} {
			req, _ := http.NewRequest(http.MethodDelete, base+"/"+pattern, nil)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				resp.Body.Close()
			}
		}
	})
	return cfg
}

// openSearchClient is the adapter on cfg's index, for checks that look at
// the index itself.
func openSearchClient(t *testing.T, cfg Config) *opensearch.Client {
	t.Helper()
	c, err := newOpenSearch(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestRetrievalSuite(t *testing.T) {
	forEachBackend(t, func(t *testing.T, cfg Config) {
		in, admin, kb := ingestEnv(t, cfg)
		english := admin.uploadAccepted(kb, "tardigrades.txt",
			[]byte("Tardigrades survive extreme dehydration by forming a tun state.\n\nThey were discovered in 1773."))
		chinese := admin.uploadAccepted(kb, "缓存.md", []byte("# 缓存策略\n\n系统使用 Redis 缓存热点数据，过期时间为七天。"))
		other := admin.createKB("other-" + strings.ToLower(testenv.RandomSuffix()))
		hidden := admin.uploadAccepted(other, "hidden.txt", []byte("Tardigrades are also called water bears and moss piglets."))
		for _, d := range []docJSON{english, chinese, hidden} {
			admin.waitReady(d.ID)
		}

		for _, tc := range []struct {
			name, question string
			want           docJSON
		}{
			{"English is stemmed, stop words dropped", "the tardigrade dehydrated", english},
			{"Chinese by bigrams", "热点数据的过期时间", chinese},
		} {
			t.Run(tc.name, func(t *testing.T) {
				c := admin.forTest(t)
				for _, mode := range []string{"keyword", "hybrid"} {
					hits := c.search(kb, tc.question, mode)
					if len(hits) == 0 || hits[0].DocumentID != tc.want.ID {
						t.Fatalf("%s: %+v", mode, hits)
					}
				}
			})
		}
		t.Run("knowledge-base filter", func(t *testing.T) {
			c := admin.forTest(t)
			if hits := c.search(kb, "tardigrades water bears", "keyword"); hasDocument(hits, hidden.ID) {
				t.Fatalf("another knowledge base's chunk: %+v", hits)
			}
			if hits := c.search(other, "tardigrades", "keyword"); !hasDocument(hits, hidden.ID) || hasDocument(hits, english.ID) {
				t.Fatalf("other knowledge base: %+v", hits)
			}
		})
		t.Run("access decides the knowledge bases", func(t *testing.T) {
			in.createUser(t, admin.token, "reader", "reader-password", "user")
			if r := admin.forTest(t).do("POST", "/api/v1/knowledge-bases/"+kb+"/members",
				map[string]string{"kind": "user", "name": "reader", "role": "viewer"}); r.Status != http.StatusCreated {
				t.Fatalf("grant: %d %s", r.Status, r.Body)
			}
			reader := in.client(t, in.login(t, "reader", "reader-password"))
			r := reader.do("POST", "/api/v1/search", map[string]any{"query": "tardigrades", "mode": "keyword", "topK": 10})
			var out struct{ Results []searchHit }
			r.json(t, &out)
			if r.Status != http.StatusOK || !hasDocument(out.Results, english.ID) || hasDocument(out.Results, hidden.ID) {
				t.Fatalf("all readable: %d %+v", r.Status, out.Results)
			}
			r = reader.do("POST", "/api/v1/search", map[string]any{"query": "tardigrades", "knowledgeBaseIds": []string{other}})
			if r.Status != http.StatusNotFound {
				t.Fatalf("unreadable knowledge base: %d %s", r.Status, r.Body)
			}
		})
		t.Run("reindex serves only the new generation", func(t *testing.T) {
			c := admin.forTest(t)
			before := c.search(kb, "tardigrades dehydration", "keyword")
			if r := c.do("POST", "/api/v1/documents/"+english.ID+"/reindex", nil); r.Status != http.StatusAccepted {
				t.Fatalf("reindex: %d %s", r.Status, r.Body)
			}
			got := c.waitDone(english.ID, 30*time.Second)
			if got.Status != "ready" || got.Generation != 2 {
				t.Fatalf("after reindex: %+v", got)
			}
			after := c.search(kb, "tardigrades dehydration", "keyword")
			if !hasDocument(after, english.ID) {
				t.Fatalf("reindexed document not found: %+v", after)
			}
			for _, h := range after {
				if slices.ContainsFunc(before, func(b searchHit) bool { return b.ChunkID == h.ChunkID }) {
					t.Fatalf("chunk %s of the replaced generation still found", h.ChunkID)
				}
			}
		})
		t.Run("delete removes it from search", func(t *testing.T) {
			c := admin.forTest(t)
			if r := c.do("DELETE", "/api/v1/documents/"+english.ID, nil); r.Status != http.StatusNoContent {
				t.Fatalf("delete: %d %s", r.Status, r.Body)
			}
			for _, mode := range []string{"keyword", "vector", "hybrid"} {
				if hasDocument(c.search(kb, "tardigrades dehydration tun state", mode), english.ID) {
					t.Fatalf("%s search still finds the deleted document", mode)
				}
			}
		})
		t.Run("deleting a knowledge base", func(t *testing.T) {
			c := admin.forTest(t)
			if r := c.do("DELETE", "/api/v1/knowledge-bases/"+other, nil); r.Status != http.StatusNoContent {
				t.Fatalf("delete knowledge base: %d %s", r.Status, r.Body)
			}
			r := c.do("POST", "/api/v1/search", map[string]any{"query": "tardigrades", "knowledgeBaseIds": []string{other}})
			if r.Status != http.StatusNotFound {
				t.Fatalf("search in the deleted knowledge base: %d %s", r.Status, r.Body)
			}
		})
		t.Run("readyz", func(t *testing.T) {
			resp, err := http.Get(in.url + "/readyz")
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("readyz %d", resp.StatusCode)
			}
		})
		if cfg.SearchBackend == "opensearch" {
			t.Run("the index holds exactly Postgres's chunks", func(t *testing.T) {
				waitIndexMatches(t, in, openSearchClient(t, cfg))
			})
		}
	})
}

// waitIndexMatches waits until the OpenSearch index holds exactly the chunks
// Postgres has: nothing deleted or superseded left, nothing missing.
func waitIndexMatches(t *testing.T, in *instance, osc *opensearch.Client) {
	t.Helper()
	ctx := context.Background()
	var inPG, inOS []int64
	testenv.Eventually(t, 60*time.Second, "the index to match Postgres", func() bool {
		inPG, inOS = nil, nil
		chunks, err := in.app.store.ChunksAfter(ctx, 0, 100000)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunks {
			inPG = append(inPG, int64(c.ID))
		}
		if err := osc.Refresh(ctx, osc.Alias()); err != nil {
			t.Fatal(err)
		}
		ids, err := osc.ChunkIDs(ctx, osc.Alias(), 0, 10000)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			inOS = append(inOS, int64(id))
		}
		return slices.Equal(inPG, inOS)
	})
}

// TestKeywordIndexAcrossBackendSwitch: on the OpenSearch backend Postgres's
// keyword index is not written (nothing searches it there), and an
// instance switched back to the Postgres backend rebuilds it at start: it
// finds what was ingested meanwhile and not what was deleted meanwhile.
func TestKeywordIndexAcrossBackendSwitch(t *testing.T) {
	osCfg := openSearchConfig(t, "")
	pgCfg := osCfg
	pgCfg.SearchBackend = "postgres"
	ctx := context.Background()
	keyword := func(in *instance, kb, word string) int {
		t.Helper()
		kbID, err := service.ParseID(kb)
		if err != nil {
			t.Fatal(err)
		}
		res, err := in.app.store.KeywordSearch(ctx, service.KeywordQuery{KnowledgeBaseIDs: []service.ID{kbID},
			Terms: retrieve.TermCounts(text.Tokenize(word)), K1: 0.9, B: 0.4, Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		return len(res)
	}

	// On Postgres: a document, in the keyword index.
	pg, c, kb := ingestEnv(t, pgCfg)
	old := c.uploadAccepted(kb, "walrus.txt", []byte("The walrus rests on drifting ice."))
	c.waitReady(old.ID)
	if keyword(pg, kb, "walrus") != 1 {
		t.Fatal("the Postgres backend does not find its own document")
	}
	pg.stop()

	// On OpenSearch: that document deleted, another ingested; Postgres's
	// index is stale and takes neither change.
	os := start(t, osCfg)
	c = os.adminClient(t)
	if r := c.do("DELETE", "/api/v1/documents/"+old.ID, nil); r.Status != http.StatusNoContent && r.Status != http.StatusOK {
		t.Fatalf("delete: %d %s", r.Status, r.Body)
	}
	doc := c.uploadAccepted(kb, "glacier.txt", []byte("A glacier carves the valley slowly."))
	c.waitReady(doc.ID)
	if n := keyword(os, kb, "glacier"); n != 0 {
		t.Fatalf("the OpenSearch backend wrote Postgres's keyword index (%d hits)", n)
	}
	if hits := c.search(kb, "glacier", "keyword"); len(hits) != 1 {
		t.Fatalf("OpenSearch finds %d hits for the new document", len(hits))
	}
	if stale, err := os.app.store.KeywordIndexStale(ctx); err != nil || !stale {
		t.Fatalf("keyword index stale = %v (%v) on the OpenSearch backend", stale, err)
	}
	os.stop()

	// Back on Postgres: rebuilt at start.
	pg = start(t, pgCfg)
	c = pg.adminClient(t)
	if hits := c.search(kb, "glacier", "keyword"); len(hits) != 1 || hits[0].DocumentID != doc.ID {
		t.Fatalf("after the switch back the new document is not found: %+v", hits)
	}
	if hits := c.search(kb, "walrus", "keyword"); len(hits) != 0 {
		t.Fatalf("after the switch back the deleted document is found: %+v", hits)
	}
	if stale, err := pg.app.store.KeywordIndexStale(ctx); err != nil || stale {
		t.Fatalf("keyword index stale = %v (%v) after the rebuild", stale, err)
	}
}
