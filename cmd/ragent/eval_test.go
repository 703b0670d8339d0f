package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEvalCommand runs `ragent eval` end to end on a three-document BEIR
// folder whose queries each name one document's unique word: the corpus goes
// through the real ingestion pipeline and keyword search finds every
// judged document first, on each search backend.
func TestEvalCommand(t *testing.T) {
	forEachBackend(t, testEvalCommand)
}

func testEvalCommand(t *testing.T, cfg Config) {
	dir := t.TempDir()
	files := map[string]string{
		"corpus.jsonl": `{"_id":"d1","title":"Walruses","text":"The walrus lives on Arctic ice floes and eats clams."}
{"_id":"d2","title":"Volcanoes","text":"A volcano erupts when magma reaches the surface of the crust."}
{"_id":"d3","title":"Harpsichords","text":"The harpsichord plucks its strings with quills."}
`,
		"queries.jsonl": `{"_id":"q1","text":"walrus"}
{"_id":"q2","text":"volcano magma"}
{"_id":"q3","text":"harpsichord"}
`,
		"qrels/test.tsv": "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td3\t1\n",
	}
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	err := evalCommand(context.Background(), cfg, testLogger(t),
		[]string{"--dataset", dir, "--mode", "keyword"}, &out, io.Discard)
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, out.String())
	}
	for _, want := range []string{"ingest documents=3 failed=0", "mode=keyword ndcg@10=1.0000 recall@10=1.0000", "queries=3"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}
