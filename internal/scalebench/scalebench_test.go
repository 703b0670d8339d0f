package scalebench

import (
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/ragent-go/ragent/internal/eval"
	"github.com/ragent-go/ragent/text"
)

func newGen(t *testing.T, spec Spec) *Generator {
	t.Helper()
	g, err := NewGenerator(spec)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestDeterministicAndPrefixStable(t *testing.T) {
	for _, lang := range []string{"en", "zh"} {
		t.Run(lang, func(t *testing.T) {
			small := newGen(t, Spec{Lang: lang, Docs: 100, Queries: 10, Seed: 7})
			large := newGen(t, Spec{Lang: lang, Docs: 100000, Queries: 10, Seed: 7})
			other := newGen(t, Spec{Lang: lang, Docs: 100, Queries: 10, Seed: 8})
			for i := range 100 {
				if small.Doc(i) != large.Doc(i) {
					t.Fatalf("doc %d differs between corpus sizes: the first n documents must be the corpus of size n", i)
				}
			}
			if small.Doc(3) == other.Doc(3) {
				t.Error("another seed gave the same document")
			}
			q1, d1 := small.Query(5)
			q2, d2 := newGen(t, Spec{Lang: lang, Docs: 100, Queries: 10, Seed: 7}).Query(5)
			if q1 != q2 || d1 != d2 {
				t.Errorf("query 5 not deterministic: %q/%d vs %q/%d", q1, d1, q2, d2)
			}
		})
	}
}

// TestZipfVocabulary checks the rank-frequency law of the generated text:
// on a log-log plot the frequencies of ranks 1–1000 fall on a line of
// slope close to −1, as in natural language.
func TestZipfVocabulary(t *testing.T) {
	for _, lang := range []string{"en", "zh"} {
		t.Run(lang, func(t *testing.T) {
			g := newGen(t, Spec{Lang: lang, Docs: 2000, Seed: 1})
			freq := map[string]int{}
			for i := range 2000 {
				for _, w := range g.words(i) {
					freq[w]++
				}
			}
			counts := make([]int, 0, len(freq))
			for _, c := range freq {
				counts = append(counts, c)
			}
			sort.Sort(sort.Reverse(sort.IntSlice(counts)))
			// Least squares of log(freq) on log(rank), ranks 1..1000.
			var sx, sy, sxx, sxy float64
			n := 1000.0
			for r := 1; r <= 1000; r++ {
				x, y := math.Log(float64(r)), math.Log(float64(counts[r-1]))
				sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
			}
			slope := (n*sxy - sx*sy) / (n*sxx - sx*sx)
			if slope > -0.8 || slope < -1.3 {
				t.Errorf("rank-frequency slope %.2f, want about -1", slope)
			}
		})
	}
}

// TestStopWordHead: the English-like vocabulary opens with the stop words
// the tokenizer drops, so they are about 40% of the text, as in English.
func TestStopWordHead(t *testing.T) {
	for _, w := range stopWords {
		if terms := text.Tokenize(w); len(terms) != 0 {
			t.Errorf("%q is not a stop word of the tokenizer: %v", w, terms)
		}
	}
	g := newGen(t, Spec{Lang: "en", Docs: 500, Seed: 1})
	words, stops := 0, 0
	for i := range 500 {
		for _, w := range g.words(i) {
			words++
			if g.isStop(w) {
				stops++
			}
		}
	}
	if share := float64(stops) / float64(words); share < 0.3 || share > 0.5 {
		t.Errorf("stop words are %.0f%% of the text, want about 40%%", 100*share)
	}
}

func TestDocumentLengths(t *testing.T) {
	g := newGen(t, Spec{Lang: "en", Docs: 3000, Seed: 1})
	lengths := make([]int, 3000)
	for i := range lengths {
		lengths[i] = len(strings.Fields(g.Doc(i).Text))
	}
	slices.Sort(lengths)
	if med := lengths[len(lengths)/2]; med < 70 || med > 110 {
		t.Errorf("median length %d words, want about 90", med)
	}
	if lengths[0] < 15 || lengths[len(lengths)-1] > 600 {
		t.Errorf("lengths %d..%d outside 15..600", lengths[0], lengths[len(lengths)-1])
	}
	if p99 := lengths[len(lengths)*99/100]; p99 < 200 {
		t.Errorf("p99 length %d: want a long tail", p99)
	}
}

func TestChineseLikeText(t *testing.T) {
	g := newGen(t, Spec{Lang: "zh", Docs: 50, Seed: 1})
	for i := range 50 {
		for _, r := range g.Doc(i).Text {
			if !text.IsCJK(r) && r != '，' && r != '。' {
				t.Fatalf("doc %d has %q: want Han characters and Chinese punctuation only", i, r)
			}
		}
	}
	if terms := text.Tokenize(g.Doc(0).Text); len(terms) < 10 || len([]rune(terms[0])) > 2 {
		t.Errorf("Chinese-like text tokenizes to %v: want character bigrams", terms[:min(5, len(terms))])
	}
}

// TestQueriesDrawnFromDocuments: every query's terms occur in its source
// document, and QueryAt keeps to the prefix it is given.
func TestQueriesDrawnFromDocuments(t *testing.T) {
	g := newGen(t, Spec{Lang: "en", Docs: 5000, Seed: 3})
	for i := range 200 {
		q, d := g.QueryAt(i, 300)
		if d < 0 || d >= 300 {
			t.Fatalf("query %d drawn from document %d, outside the first 300", i, d)
		}
		doc := text.Tokenize(g.Doc(d).Text)
		terms := text.Tokenize(q)
		if len(terms) < 1 || len(strings.Fields(q)) > 7 {
			t.Fatalf("query %d %q: want two to six words and at least one that is not a stop word", i, q)
		}
		for _, term := range terms {
			if !slices.Contains(doc, term) {
				t.Fatalf("query %d term %q not in its source document %d", i, term, d)
			}
		}
	}
	zh := newGen(t, Spec{Lang: "zh", Docs: 100, Seed: 3})
	for i := range 50 {
		q, d := zh.Query(i)
		src := zh.Doc(d).Text
		for _, r := range q {
			if !strings.ContainsRune(src, r) || !unicode.Is(unicode.Han, r) {
				t.Fatalf("zh query %d %q: rune %q not from its source document", i, q, r)
			}
		}
	}
}

// TestWriteBEIR: the folder Write produces is read by the eval loader, the
// format `ragent eval` and the BEIR tools use.
func TestWriteBEIR(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "en")
	g := newGen(t, Spec{Lang: "en", Docs: 300, Queries: 40, Seed: 2})
	if err := g.Write(dir); err != nil {
		t.Fatal(err)
	}
	ds, err := eval.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ds.Corpus) != 300 || len(ds.Queries) != 40 {
		t.Fatalf("read %d documents and %d judged queries, want 300 and 40", len(ds.Corpus), len(ds.Queries))
	}
	for i, d := range ds.Corpus {
		if d.ID != DocID(i) || d.Text != g.Doc(i).Text {
			t.Fatalf("corpus line %d is %q, want document %s", i, d.ID, DocID(i))
		}
	}
	for i, q := range ds.Queries {
		text, doc := g.Query(i)
		if q.ID != QueryID(i) || q.Text != text || len(q.Qrels) != 1 || q.Qrels[DocID(doc)] != 1 {
			t.Fatalf("query line %d: %+v, want %q judged on %s", i, q, text, DocID(doc))
		}
	}
	if n, ok := DocIndex("d123"); !ok || n != 123 {
		t.Errorf("DocIndex(d123) = %d, %v", n, ok)
	}
}

func TestValidate(t *testing.T) {
	for _, s := range []Spec{{Lang: "fr", Docs: 1}, {Lang: "en"}, {Lang: "en", Docs: 1, Queries: -1}, {Lang: "en", Docs: 1, Vocab: 10}} {
		if _, err := NewGenerator(s); err == nil {
			t.Errorf("NewGenerator(%+v) accepted", s)
		}
	}
}

func TestPercentiles(t *testing.T) {
	d := make([]time.Duration, 100)
	for i := range d {
		d[i] = time.Duration(100-i) * time.Millisecond
	}
	if p50, p99 := Percentiles(d); p50 != 50*time.Millisecond || p99 != 99*time.Millisecond {
		t.Errorf("p50 %v p99 %v, want 50ms 99ms", p50, p99)
	}
	if p50, p99 := Percentiles(nil); p50 != 0 || p99 != 0 {
		t.Errorf("empty: %v %v", p50, p99)
	}
}
