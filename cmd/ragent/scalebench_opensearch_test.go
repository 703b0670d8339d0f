package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/internal/scalebench"
)

// TestScalebenchCommandOpenSearch runs `ragent scalebench run` on the
// OpenSearch backend (scripts/scalebench.sh BACKEND=opensearch): the bulk
// loader's documents reach OpenSearch through the search-index outbox and
// turn ready, the run waits for that before timing, keyword search over
// the store and /search finds the queries' sources, and the index holds
// every chunk, pipeline-ingested ones included.
func TestScalebenchCommandOpenSearch(t *testing.T) {
	ctx := context.Background()
	cfg := openSearchConfig(t, "")
	var out bytes.Buffer
	err := scalebenchCommand(ctx, cfg, testLogger(t), []string{"run", "--sizes", "300", "--queries", "20",
		"--ingest", "5"}, &out, io.Discard)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	var r scalebench.Result
	if err := json.Unmarshal(bytes.TrimSpace(out.Bytes()), &r); err != nil {
		t.Fatalf("%v in %q", err, out.String())
	}
	if r.Chunks != 300 || r.IngestDocs != 5 || r.IngestChunks != 5 {
		t.Errorf("chunks %d, ingested %d documents / %d chunks; want 300 and 5 / 5", r.Chunks, r.IngestDocs, r.IngestChunks)
	}
	for _, path := range []string{"store", "http"} {
		for _, mode := range []string{"keyword", "hybrid"} {
			if l := r.Latency[mode][path]; l.P50 <= 0 || l.Hit10 < 0.6 {
				t.Errorf("%s %s: %+v", mode, path, l)
			}
		}
	}
	resp, err := http.Get(strings.TrimRight(cfg.OpenSearchURL, "/") + "/" + cfg.OpenSearchIndex + "/_count")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var count struct{ Count int }
	if err := json.NewDecoder(resp.Body).Decode(&count); err != nil || count.Count != 305 {
		t.Errorf("OpenSearch holds %d chunks (%v); want 305", count.Count, err)
	}
}
