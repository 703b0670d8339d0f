package eval

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestNDCGAt(t *testing.T) {
	qrels := map[string]int{"a": 2, "b": 1}
	tests := []struct {
		name   string
		ranked []string
		k      int
		want   float64
	}{
		// Ideal DCG: 2/log2(2) + 1/log2(3) = 2 + 0.6309297535714575.
		{"ideal order", []string{"a", "b"}, 10, 1},
		// DCG: 1/log2(2) + 2/log2(3) = 1 + 1.2618595071429148.
		{"swapped", []string{"b", "a"}, 10, (1 + 2/math.Log2(3)) / (2 + 1/math.Log2(3))},
		// "a" at rank 3: 2/log2(4) = 1.
		{"one found at rank 3", []string{"x", "y", "a"}, 10, 1 / (2 + 1/math.Log2(3))},
		{"cut at k", []string{"x", "y", "a"}, 2, 0},
		{"nothing found", []string{"x"}, 10, 0},
		{"empty ranking", nil, 10, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := NDCGAt(tt.ranked, qrels, tt.k); !near(got, tt.want) {
				t.Fatalf("NDCGAt = %v, want %v", got, tt.want)
			}
		})
	}
	if got := NDCGAt([]string{"a"}, nil, 10); got != 0 {
		t.Errorf("no judgements: %v, want 0", got)
	}
	// A hand-computed value: qrels {a:3, b:2, c:1}, ranking c, x, a.
	// DCG = 1/1 + 0 + 3/2 = 2.5; IDCG = 3 + 2/log2(3) + 1/2 = 4.761859507142915.
	if got := NDCGAt([]string{"c", "x", "a"}, map[string]int{"a": 3, "b": 2, "c": 1}, 10); !near(got, 2.5/4.761859507142915) {
		t.Errorf("graded: %v, want %v", got, 2.5/4.761859507142915)
	}
}

func TestRecallAt(t *testing.T) {
	qrels := map[string]int{"a": 1, "b": 1, "c": 2, "d": 1}
	for _, tt := range []struct {
		ranked []string
		k      int
		want   float64
	}{
		{[]string{"a", "x", "c"}, 10, 0.5},
		{[]string{"a", "x", "c"}, 2, 0.25},
		{[]string{"d", "c", "b", "a"}, 10, 1},
		{nil, 10, 0},
	} {
		if got := RecallAt(tt.ranked, qrels, tt.k); !near(got, tt.want) {
			t.Errorf("RecallAt(%v, k=%d) = %v, want %v", tt.ranked, tt.k, got, tt.want)
		}
	}
	if got := RecallAt([]string{"a"}, nil, 10); got != 0 {
		t.Errorf("no judgements: %v, want 0", got)
	}
}

func TestPercentile(t *testing.T) {
	// 1..10 ms in reverse order: nearest rank of p is the ceil(p*n)-th smallest.
	var ds []time.Duration
	for i := 10; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for _, tt := range []struct {
		p    float64
		want time.Duration
	}{
		{0.5, 5 * time.Millisecond},
		{0.99, 10 * time.Millisecond},
		{0.1, 1 * time.Millisecond},
		{0.11, 2 * time.Millisecond},
		{1, 10 * time.Millisecond},
		{0, 1 * time.Millisecond},
	} {
		if got := Percentile(ds, tt.p); got != tt.want {
			t.Errorf("Percentile(p=%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if ds[0] != 10*time.Millisecond {
		t.Error("Percentile sorted its argument in place")
	}
	if got := Percentile(nil, 0.5); got != 0 {
		t.Errorf("empty: %v", got)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("corpus.jsonl", `{"_id":"d1","title":"T1","text":"one"}`+"\n\n"+`{"_id":"d2","title":"","text":"two"}`+"\n")
	write("queries.jsonl", `{"_id":"q1","text":"first"}`+"\n"+`{"_id":"q2","text":"unjudged"}`+"\n"+`{"_id":"q3","text":"third"}`+"\n")
	write("qrels/test.tsv", "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td2\t0\nq3\td2\t1\n")
	ds, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Corpus) != 2 || ds.Corpus[0].Title != "T1" || ds.Corpus[1].Text != "two" {
		t.Errorf("corpus %+v", ds.Corpus)
	}
	if len(ds.Queries) != 2 || ds.Queries[0].ID != "q1" || ds.Queries[1].ID != "q3" {
		t.Fatalf("queries %+v, want the judged q1 and q3", ds.Queries)
	}
	if q := ds.Queries[0].Qrels; len(q) != 1 || q["d1"] != 2 {
		t.Errorf("q1 judgements %v: the 0 score marks no relevance", q)
	}

	write("queries.jsonl", `{"_id":"q9","text":"unjudged"}`+"\n")
	if _, err := Load(dir); err == nil {
		t.Error("a dataset without judged queries loaded")
	}
}
