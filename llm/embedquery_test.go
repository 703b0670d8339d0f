package llm

import (
	"context"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// TestEmbedQueriesAtTheirOwnURL: with EmbeddingQueryBaseURL, questions go
// to that server and passages to the embedding endpoint, for both wire
// formats; without it both go to the embedding endpoint. The batch size
// splits passages into calls of that many texts.
func TestEmbedQueriesAtTheirOwnURL(t *testing.T) {
	for _, provider := range []string{ProviderOpenAI, ProviderOllama} {
		t.Run(provider, func(t *testing.T) {
			docs, docReqs := recordingServer(t)
			queries, queryReqs := recordingServer(t)
			base := docs.URL + "/v1"
			if provider == ProviderOllama {
				base = docs.URL
			}
			e := embedderFor(t, Config{
				EmbeddingProvider: provider, EmbeddingModel: "m", EmbeddingDim: 3,
				EmbeddingBaseURL: base, EmbeddingQueryBaseURL: queries.URL + "/v1/",
				EmbeddingBatchSize: 2,
			})
			ctx := context.Background()
			if _, err := e.Embed(ctx, service.EmbedQuery, []string{"question"}); err != nil {
				t.Fatal(err)
			}
			if _, err := e.Embed(ctx, service.EmbedDocument, []string{"a", "b", "c"}); err != nil {
				t.Fatal(err)
			}
			if got := queryReqs(); len(got) != 1 || len(got[0].Input) != 1 {
				t.Fatalf("query server got %+v, want the one question", got)
			}
			// The two calls run concurrently: their order is the server's.
			got := docReqs()
			if len(got) != 2 || len(got[0].Input)+len(got[1].Input) != 3 || max(len(got[0].Input), len(got[1].Input)) != 2 {
				t.Fatalf("document server got %+v, want calls of 2 and 1 passages", got)
			}
		})
	}
	t.Run("unset", func(t *testing.T) {
		srv, reqs := recordingServer(t)
		e := embedderFor(t, Config{EmbeddingProvider: ProviderOpenAI, EmbeddingModel: "m", EmbeddingDim: 3, EmbeddingBaseURL: srv.URL + "/v1"})
		for _, kind := range []service.EmbedKind{service.EmbedQuery, service.EmbedDocument} {
			if _, err := e.Embed(context.Background(), kind, []string{"x"}); err != nil {
				t.Fatal(err)
			}
		}
		if n := len(reqs()); n != 2 {
			t.Fatalf("embedding endpoint got %d calls, want both", n)
		}
	})
}
