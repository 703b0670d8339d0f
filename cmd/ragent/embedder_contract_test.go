package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/llm"
	"github.com/ragent-go/ragent/service"
)

// TestLocalEmbedderContract checks what ragent relies on from the local
// embedding server (scripts/embedder/server.py, both processes), through
// ragent's own openai provider: a question and a passage of the same text
// embed differently (e5's prefixes, from input_type), a batch answers in
// input order with the vectors its texts get alone, both processes serve
// the same model, and a request over the server's bounds is refused with
// an OpenAI-style error instead of holding the model.
func TestLocalEmbedderContract(t *testing.T) {
	docURL, queryURL := testenv.EmbedderURL(t), testenv.EmbedderQueryURL(t)
	embedder := func(base string) service.Embedder {
		e, err := llm.NewEmbedder(llm.Config{EmbeddingProvider: llm.ProviderOpenAI, EmbeddingModel: testenv.EmbedderModel,
			EmbeddingBaseURL: base, EmbeddingDim: testenv.EmbedderDim})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	doc, query := embedder(docURL), embedder(queryURL)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	embed := func(e service.Embedder, kind service.EmbedKind, texts ...string) [][]float32 {
		t.Helper()
		vecs, err := e.Embed(ctx, kind, texts)
		if err != nil {
			t.Fatal(err)
		}
		if len(vecs) != len(texts) {
			t.Fatalf("%d vectors for %d texts", len(vecs), len(texts))
		}
		for _, v := range vecs {
			if len(v) != testenv.EmbedderDim || math.Abs(cosine(v, v)-1) > 1e-3 {
				t.Fatalf("vector of %d numbers, norm² %.4f; want %d, 1", len(v), cosine(v, v), testenv.EmbedderDim)
			}
		}
		return vecs
	}

	const text = "How do I connect to the office network from home?"
	q, p := embed(query, service.EmbedQuery, text)[0], embed(doc, service.EmbedDocument, text)[0]
	if c := cosine(q, p); c > 0.99 {
		t.Errorf("query and passage of the same text at cosine %.4f: input_type ignored", c)
	}
	if c := cosine(q, embed(doc, service.EmbedQuery, text)[0]); c < 0.9999 {
		t.Errorf("the query process and the document process disagree: cosine %.4f", c)
	}

	// Order: each batch row is closest to its own text embedded alone (an
	// int8 model's vector moves slightly with its batch mates: the
	// activations of a batch are quantised together).
	texts := []string{
		"猫坐在垫子上晒太阳。",
		"The central bank raised interest rates by a quarter point.",
		text,
		"Mitochondria produce most of the cell's chemical energy.",
	}
	batch := embed(doc, service.EmbedDocument, texts...)
	for i := range texts {
		alone := embed(doc, service.EmbedDocument, texts[i])[0]
		for j := range texts {
			c := cosine(batch[j], alone)
			if (i == j && c < 0.99) || (i != j && c > 0.95) {
				t.Errorf("batch row %d vs text %d alone: cosine %.4f", j, i, c)
			}
		}
	}

	// Bounds: a body over 8 MiB is refused before parsing (413), more than 2048
	// texts with 400; both as OpenAI-style errors.
	huge, _ := json.Marshal(map[string]any{"model": testenv.EmbedderModel, "input": strings.Repeat("a", 9<<20)})
	many, _ := json.Marshal(map[string]any{"model": testenv.EmbedderModel, "input": make([]string, 2049)})
	for _, tc := range []struct {
		name string
		body []byte
		want int
	}{{"9 MiB body", huge, http.StatusRequestEntityTooLarge}, {"2049 texts", many, http.StatusBadRequest}} {
		status, msg := postEmbeddings(t, docURL, tc.body)
		if status != tc.want || !strings.Contains(msg, "limit") {
			t.Errorf("%s: %d %q; want %d and a message naming the limit", tc.name, status, msg, tc.want)
		}
	}
}

// postEmbeddings posts body to base/embeddings and returns the status and
// the error message of an OpenAI-style error body.
func postEmbeddings(t *testing.T, base string, body []byte) (int, string) {
	t.Helper()
	resp, err := http.Post(base+"/embeddings", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e struct {
		Error struct{ Message string }
	}
	if err := json.Unmarshal(raw, &e); err != nil {
		return resp.StatusCode, fmt.Sprintf("not an error object: %.200s", raw)
	}
	return resp.StatusCode, e.Error.Message
}

// cosine of two unit vectors: their dot product.
func cosine(a, b []float32) float64 {
	var dot float64
	for i := range a {
		dot += float64(a[i]) * float64(b[i])
	}
	return dot
}
