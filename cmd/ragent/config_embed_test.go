package main

import (
	"strings"
	"testing"
)

// TestEmbeddingQueryURLAndBatchSize: the query endpoint and the batch size
// reach Config; a query endpoint with a provider that cannot use it and a
// batch size below 1 are refused.
func TestEmbeddingQueryURLAndBatchSize(t *testing.T) {
	load := func(kv ...string) (Config, error) {
		env := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			env[kv[i]] = kv[i+1]
		}
		return loadConfig(func(k string) string { return env[k] })
	}
	c, err := load("RAGENT_EMBEDDING_PROVIDER", "openai", "RAGENT_EMBEDDING_MODEL", "m", "RAGENT_EMBEDDING_DIM", "384",
		"RAGENT_EMBEDDING_QUERY_BASE_URL", "http://127.0.0.1:8766/v1", "RAGENT_EMBEDDING_BATCH_SIZE", "4")
	if err != nil {
		t.Fatal(err)
	}
	if l := llmConfig(c, nil); l.EmbeddingQueryBaseURL != "http://127.0.0.1:8766/v1" || l.EmbeddingBatchSize != 4 {
		t.Fatalf("llm config has query URL %q, batch %d", l.EmbeddingQueryBaseURL, l.EmbeddingBatchSize)
	}
	if c, err := load(); err != nil || c.EmbedBatchSize != 32 || c.EmbedQueryBaseURL != "" {
		t.Fatalf("defaults: batch %d, query URL %q, %v", c.EmbedBatchSize, c.EmbedQueryBaseURL, err)
	}
	for _, tt := range []struct {
		kv   []string
		want string
	}{
		{[]string{"RAGENT_EMBEDDING_QUERY_BASE_URL", "http://127.0.0.1:8766/v1"}, "RAGENT_EMBEDDING_QUERY_BASE_URL"},
		{[]string{"RAGENT_EMBEDDING_BATCH_SIZE", "0"}, "RAGENT_EMBEDDING_BATCH_SIZE"},
	} {
		if _, err := load(tt.kv...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%v: error %v, want one naming %s", tt.kv, err, tt.want)
		}
	}
}
