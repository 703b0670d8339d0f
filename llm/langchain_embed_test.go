package llm

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/service"
)

func TestGeminiEmbedder(t *testing.T) {
	v := newVendor(t, func(n int, w http.ResponseWriter, r *http.Request) {
		if n == 0 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, `{"error":{"code":429,"message":"quota","status":"RESOURCE_EXHAUSTED"}}`, http.StatusTooManyRequests)
			return
		}
		var req struct {
			Requests []any `json:"requests"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		var out []any
		for i := range req.Requests {
			out = append(out, map[string]any{"values": []float32{float32(i), 1, 2}})
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"embeddings": out})
	})
	e := embedderFor(t, Config{EmbeddingProvider: ProviderGoogleAI, EmbeddingBaseURL: v.srv.URL, EmbeddingAPIKey: "g-key", EmbeddingModel: "text-embedding-004", EmbeddingBatchSize: 2})
	vecs, err := e.Embed(context.Background(), service.EmbedDocument, inputs(3))
	if err != nil {
		t.Fatal(err)
	}
	// Two batches (2 + 1), the first retried after its 429.
	if len(vecs) != 3 || vecs[1][0] != 1 || vecs[2][0] != 0 || e.Dim() != 3 || v.calls() != 3 {
		t.Fatalf("vectors %v, dim %d, %d calls", vecs, e.Dim(), v.calls())
	}
	path, hdr, _ := v.request(1)
	if !strings.HasPrefix(path, "/v1beta/models/text-embedding-004:batchEmbedContents") || hdr.Get("x-goog-api-key") != "g-key" {
		t.Fatalf("request %s %v", path, hdr)
	}
}

func TestBedrockEmbedder(t *testing.T) {
	const model = "cohere.embed-multilingual-v3"
	dim := 4
	v := newVendor(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		var req struct {
			Texts []string `json:"texts"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		out := make([][]float32, len(req.Texts))
		for i := range out {
			out[i] = make([]float32, dim)
			out[i][0] = float32(i)
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"response_type": "embeddings_floats", "embeddings": out})
	})
	e := embedderFor(t, Config{EmbeddingProvider: ProviderBedrock, EmbeddingBaseURL: v.srv.URL, EmbeddingAPIKey: "AKIDTEST:secret", Region: "eu-central-1",
		EmbeddingModel: model, EmbeddingDim: 4})
	// The kind reaches the model: Cohere's input_type.
	for i, tt := range []struct {
		kind service.EmbedKind
		want string
	}{{service.EmbedDocument, "search_document"}, {service.EmbedQuery, "search_query"}} {
		vecs, err := e.Embed(context.Background(), tt.kind, []string{"a", "b"}[:2-i])
		if err != nil || len(vecs) != 2-i {
			t.Fatalf("kind %d: %v %v", tt.kind, vecs, err)
		}
		path, hdr, body := v.request(i)
		if !strings.Contains(path, "/model/cohere.embed-multilingual-v3/invoke") || body["input_type"] != tt.want ||
			!strings.HasPrefix(hdr.Get("Authorization"), "AWS4-HMAC-SHA256 Credential=AKIDTEST/") {
			t.Fatalf("request %s %v %v", path, hdr, body)
		}
	}
	dim = 5
	_, err := e.Embed(context.Background(), service.EmbedDocument, []string{"a"})
	if !errors.Is(err, service.ErrUnavailable) || !strings.Contains(err.Error(), "returned 5 dimensions but the configured dimension (RAGENT_EMBEDDING_DIM) is 4") {
		t.Fatalf("err = %v", err)
	}
}

func TestBedrockEmbedderThrottled(t *testing.T) {
	v := newVendor(t, func(_ int, w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("X-Amzn-Errortype", "ThrottlingException")
		w.WriteHeader(http.StatusTooManyRequests)
		io.WriteString(w, `{"message":"Too many requests"}`)
	})
	e := embedderFor(t, Config{EmbeddingProvider: ProviderBedrock, EmbeddingBaseURL: v.srv.URL, EmbeddingAPIKey: "AKIDTEST:secret", Region: "eu-central-1",
		EmbeddingModel: "amazon.titan-embed-text-v2:0", EmbeddingDim: 4, MaxRetries: 2})
	_, err := e.Embed(context.Background(), service.EmbedDocument, []string{"a"})
	var se *statusError
	if !errors.Is(err, service.ErrUnavailable) || !errors.As(err, &se) || se.code != 429 || v.calls() != 3 {
		t.Fatalf("err = %v after %d calls, want a 429 after 1 + 2 retries", err, v.calls())
	}
}
