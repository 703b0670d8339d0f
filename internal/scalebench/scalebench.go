// Package scalebench measures retrieval and ingestion as the corpus grows:
// it generates synthetic BEIR-format corpora (English-like or Chinese-like,
// Zipf-distributed vocabulary, queries drawn from documents), bulk-loads
// them through the store's own chunk-writing method, times the three search
// modes in-process and over HTTP, and times ingestion through the real
// pipeline with the corpus already present. `ragent scalebench` wires it to
// a running App; scripts/scalebench.sh drives the whole run.
//
// Every document is a function of the seed and its index only, so the
// first n documents of a larger corpus are the corpus of size n: one file
// serves every size, and nothing needs to be checked in.
package scalebench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Spec describes a synthetic corpus.
type Spec struct {
	Lang    string // "en" (English-like) or "zh" (Chinese-like)
	Docs    int    // documents in corpus.jsonl
	Queries int    // queries in queries.jsonl, each drawn from one document
	Seed    uint64
	// Vocab is the vocabulary size; 0 means 50,000 (en) or 20,000 (zh) words.
	Vocab int
}

// Zipf exponent of the word distribution: natural text is close to 1.
const zipfS = 1.07

func (s Spec) vocabSize() int {
	switch {
	case s.Vocab > 0:
		return s.Vocab
	case s.Lang == "zh":
		return 20000
	}
	return 50000
}

// Validate reports a spec that cannot be generated.
func (s Spec) Validate() error {
	if s.Lang != "en" && s.Lang != "zh" {
		return fmt.Errorf("scalebench: language %q: must be en or zh", s.Lang)
	}
	if s.Docs < 1 || s.Queries < 0 {
		return fmt.Errorf("scalebench: need at least one document and no negative query count")
	}
	if s.vocabSize() < 100 {
		return fmt.Errorf("scalebench: vocabulary of %d words is too small", s.vocabSize())
	}
	return nil
}

// Generator produces the documents and queries of one Spec.
type Generator struct {
	spec  Spec
	vocab []string
}

// NewGenerator builds the vocabulary of spec; documents are produced on
// demand by index.
func NewGenerator(spec Spec) (*Generator, error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	g := &Generator{spec: spec}
	r := rand.New(rand.NewPCG(spec.Seed, 0x766f636162)) // "vocab"
	seen := make(map[string]bool, spec.vocabSize())
	if spec.Lang == "en" {
		// English's most frequent words are function words, about 40% of
		// running text, which the tokenizer drops as Lucene does; without
		// them the head of the distribution would be content words that
		// no real query pays for.
		g.vocab = append(g.vocab, stopWords...)
		for _, w := range stopWords {
			seen[w] = true
		}
	}
	for len(g.vocab) < spec.vocabSize() {
		var w string
		if spec.Lang == "zh" {
			w = cjkWord(r, len(g.vocab))
		} else {
			w = latinWord(r, len(g.vocab))
		}
		if !seen[w] {
			seen[w] = true
			g.vocab = append(g.vocab, w)
		}
	}
	return g, nil
}

// stopWords are Lucene's English stop words, roughly by frequency: the head
// of the English-like vocabulary.
var stopWords = []string{"the", "of", "and", "to", "a", "in", "is", "that", "for", "it", "as", "was", "with",
	"be", "by", "on", "not", "this", "are", "or", "at", "but", "an", "they", "their", "there",
	"these", "such", "no", "if", "into", "then", "will"}

// Syllables make pronounceable words: frequent words get one or two, rare
// ones up to five, as in English where common words are short.
var (
	onsets = []string{"b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w", "z",
		"br", "cl", "dr", "fl", "gr", "pl", "pr", "sh", "st", "th", "tr"}
	nuclei = []string{"a", "e", "i", "o", "u", "ai", "ea", "io", "ou"}
	codas  = []string{"", "", "n", "r", "s", "t", "l", "m", "nd", "st"}
)

func latinWord(r *rand.Rand, rank int) string {
	n := 1 + min(4, int(math.Log10(float64(rank+10)))-1+r.IntN(2))
	var b strings.Builder
	for range n {
		b.WriteString(onsets[r.IntN(len(onsets))])
		b.WriteString(nuclei[r.IntN(len(nuclei))])
	}
	b.WriteString(codas[r.IntN(len(codas))])
	return b.String()
}

// cjkWord returns a word of one to three common Han characters (Chinese
// words are mostly two characters; the most frequent ones often one).
func cjkWord(r *rand.Rand, rank int) string {
	n := 2
	switch p := r.IntN(10); {
	case rank < 50 || p == 0:
		n = 1
	case p >= 8:
		n = 3
	}
	var b strings.Builder
	for range n {
		// U+4E00–U+62FF: the first 5,376 unified ideographs.
		b.WriteRune(rune(0x4E00 + r.IntN(0x1500)))
	}
	return b.String()
}

// Doc is one corpus entry in BEIR's shape.
type Doc struct {
	ID    string `json:"_id"`
	Title string `json:"title"`
	Text  string `json:"text"`
}

// DocID is the corpus id of document i; QueryID that of query i.
func DocID(i int) string   { return "d" + strconv.Itoa(i) }
func QueryID(i int) string { return "q" + strconv.Itoa(i) }

// DocIndex parses a DocID.
func DocIndex(id string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(id, "d"))
	return n, err == nil && strings.HasPrefix(id, "d")
}

// words returns document i's words: a log-normal length (median about 90
// words, long tail to 600, like abstracts and wiki paragraphs) drawn from
// the Zipf distribution.
func (g *Generator) words(i int) []string {
	r := rand.New(rand.NewPCG(g.spec.Seed, uint64(i)+1))
	n := int(math.Exp(4.5 + 0.5*r.NormFloat64()))
	n = max(15, min(600, n))
	z := rand.NewZipf(r, zipfS, 1, uint64(len(g.vocab)-1))
	out := make([]string, n)
	for j := range out {
		out[j] = g.vocab[z.Uint64()]
	}
	return out
}

// Doc returns document i. Any i ≥ 0 is valid: indexes past Spec.Docs give
// fresh documents of the same distribution (the ingestion runs use them).
func (g *Generator) Doc(i int) Doc {
	w := g.words(i)
	return Doc{ID: DocID(i), Text: g.join(w)}
}

// join writes words as text: spaces and sentence ends for English-like,
// no spaces and Chinese punctuation for Chinese-like.
func (g *Generator) join(w []string) string {
	var b strings.Builder
	zh := g.spec.Lang == "zh"
	for j, word := range w {
		end := j == len(w)-1 || (j+1)%12 == 0
		switch {
		case zh:
			b.WriteString(word)
			if end {
				b.WriteString("。")
			} else if (j+1)%4 == 0 {
				b.WriteString("，")
			}
		default:
			if j > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(word)
			if end {
				b.WriteByte('.')
			}
		}
	}
	return b.String()
}

// Query i draws a document uniformly from the corpus and takes two to six
// of its words at random positions, in order: the way someone who read a
// passage asks about it. Its one relevant document is the source.
func (g *Generator) Query(i int) (text string, doc int) { return g.QueryAt(i, g.spec.Docs) }

// QueryAt is query i of the corpus's first docs documents: the benchmark
// loads a prefix of the corpus and asks about that prefix only.
func (g *Generator) QueryAt(i, docs int) (text string, doc int) {
	r := rand.New(rand.NewPCG(g.spec.Seed^0x717565727900, uint64(i)+1)) // "query"
	doc = r.IntN(docs)
	w := g.words(doc)
	n := min(len(w), 2+r.IntN(5))
	start := r.IntN(len(w) - n + 1)
	picked := make([]string, 0, n+1)
	content := false
	for j := start; len(picked) < n && j < len(w); j += 1 + r.IntN(3) {
		picked = append(picked, w[j])
		content = content || !g.isStop(w[j])
	}
	// A query of stop words only would search for nothing: add the
	// passage's next content word.
	for j := start; !content && j < len(w)+start; j++ {
		if k := j % len(w); !g.isStop(w[k]) {
			picked, content = append(picked, w[k]), true
		}
	}
	sep := " "
	if g.spec.Lang == "zh" {
		sep = ""
	}
	return strings.Join(picked, sep), doc
}

func (g *Generator) isStop(w string) bool {
	return g.spec.Lang == "en" && slices.Contains(stopWords, w)
}

// Write generates the BEIR folder: corpus.jsonl, queries.jsonl and
// qrels/test.tsv.
func (g *Generator) Write(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "qrels"), 0o755); err != nil {
		return err
	}
	if err := writeLines(filepath.Join(dir, "corpus.jsonl"), g.spec.Docs, func(i int) (any, error) { return g.Doc(i), nil }); err != nil {
		return err
	}
	type query struct {
		ID   string `json:"_id"`
		Text string `json:"text"`
	}
	if err := writeLines(filepath.Join(dir, "queries.jsonl"), g.spec.Queries, func(i int) (any, error) {
		t, _ := g.Query(i)
		return query{QueryID(i), t}, nil
	}); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "qrels", "test.tsv"))
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	fmt.Fprintln(w, "query-id\tcorpus-id\tscore")
	for i := range g.spec.Queries {
		_, d := g.Query(i)
		fmt.Fprintf(w, "%s\t%s\t1\n", QueryID(i), DocID(d))
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func writeLines(path string, n int, line func(i int) (any, error)) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	for i := range n {
		v, err := line(i)
		if err == nil {
			err = enc.Encode(v)
		}
		if err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
