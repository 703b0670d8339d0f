package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/internal/scalebench"
)

// TestScalebenchCommand runs `ragent scalebench gen` and `run` end to end
// at two tiny sizes: the bulk loader writes through ReplaceChunks, the HNSW
// index is dropped and built again, every mode answers on the store and over
// HTTP, the pipeline ingests on top of the loaded corpus, and the growth
// comparison loads the smallest size into a knowledge base of its own and
// times both sizes' keyword queries.
func TestScalebenchCommand(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig(t)
	dir := t.TempDir()
	if err := scalebenchCommand(ctx, cfg, testLogger(t), []string{"gen", "--docs", "50", "--queries", "5", "--out", dir}, io.Discard, io.Discard); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "qrels", "test.tsv")); err != nil {
		t.Fatal(err)
	}
	qdir := t.TempDir()
	var out bytes.Buffer
	err := scalebenchCommand(ctx, cfg, testLogger(t), []string{"run", "--sizes", "300,700", "--queries", "20",
		"--ingest", "15", "--queries-dir", qdir, "--profile-dir", qdir, "--growth-passes", "2"}, &out, io.Discard)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want one line per size, got:\n%s", out.String())
	}
	for i, line := range lines {
		var r scalebench.Result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatal(err)
		}
		size, chunks := []int{300, 700}[i], []int{300, 715}[i]
		if r.Size != size || r.Chunks != chunks || r.IngestDocs != 15 || r.IngestChunks != 15 {
			t.Errorf("size %d: chunks %d, ingested %d documents / %d chunks; want %d chunks and 15 / 15", r.Size, r.Chunks, r.IngestDocs, r.IngestChunks, chunks)
		}
		if r.Postings < int64(size)*20 || r.KeywordBytes <= 0 || r.DBBytes <= 0 || len(r.KeywordTables) == 0 {
			t.Errorf("size %d: postings %d, keyword bytes %d, db bytes %d", size, r.Postings, r.KeywordBytes, r.DBBytes)
		}
		for _, mode := range []string{"keyword", "vector", "hybrid"} {
			for _, path := range []string{"store", "http"} {
				l := r.Latency[mode][path]
				// Queries are drawn from documents: keyword search must
				// find most sources; the hashing embedder's vectors fewer.
				if l.P50 <= 0 || (mode != "vector" && l.Hit10 < 0.6) {
					t.Errorf("size %d %s %s: %+v", size, mode, path, l)
				}
			}
		}
		for _, f := range []string{"queries-%d.jsonl", "ingest-%d.pprof"} {
			if st, err := os.Stat(filepath.Join(qdir, fmt.Sprintf(f, size))); err != nil || st.Size() == 0 {
				t.Errorf("%s: %v", fmt.Sprintf(f, size), err)
			}
		}
		if len(r.IngestWaits) == 0 {
			t.Errorf("size %d: no database wait events sampled during ingestion", size)
		}
		if g := r.Growth; (i == 0) != (g == nil) {
			t.Errorf("size %d: growth %+v; want it on the largest size only", size, g)
		} else if g != nil {
			if g.BaselineSize != 300 || g.Passes != 2 || g.Baseline.P50 <= 0 || g.Largest.P50 <= 0 ||
				g.Baseline.Hit10 < 0.6 || g.Largest.Hit10 < 0.6 || g.Ratio != g.Largest.P50/g.Baseline.P50 {
				t.Errorf("growth %+v", g)
			}
		}
	}
	// The baseline is a knowledge base of its own holding the smallest size.
	var baseline, largest int
	err = connectDB(t, cfg.DatabaseURL).QueryRow(ctx, `SELECT
		count(*) FILTER (WHERE k.name = 'scalebench-en-baseline'), count(*) FILTER (WHERE k.name = 'scalebench-en')
		FROM chunks c JOIN knowledge_bases k ON k.id = c.kb_id`).Scan(&baseline, &largest)
	if err != nil || baseline != 300 || largest != 730 {
		t.Errorf("chunks: baseline %d, largest %d (%v); want 300 and 730 (700 loaded, 2×15 ingested)", baseline, largest, err)
	}
}
