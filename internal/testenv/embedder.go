package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Local embedding model, as scripts/services.sh start embedder runs it.
const (
	defaultEmbedderURL      = "http://127.0.0.1:8765/v1"
	defaultEmbedderQueryURL = "http://127.0.0.1:8766/v1"
	// EmbedderModel and EmbedderDim are what that server embeds with.
	EmbedderModel = "multilingual-e5-small-q4-ort"
	EmbedderDim   = 384
)

// EmbedderURL returns the OpenAI-compatible base URL of the local embedding
// model (RAGENT_TEST_EMBEDDER_URL), failing or skipping when it does not
// embed: one real request must answer 200.
func EmbedderURL(t testing.TB) string {
	t.Helper()
	return embedderAt(t, env("RAGENT_TEST_EMBEDDER_URL", defaultEmbedderURL))
}

// EmbedderQueryURL is EmbedderURL for the same model's process that embeds
// search questions only (RAGENT_TEST_EMBEDDER_QUERY_URL).
func EmbedderQueryURL(t testing.TB) string {
	t.Helper()
	return embedderAt(t, env("RAGENT_TEST_EMBEDDER_QUERY_URL", defaultEmbedderQueryURL))
}

func embedderAt(t testing.TB, url string) string {
	t.Helper()
	base := strings.TrimRight(url, "/")
	// A loaded machine may take seconds for the first embedding.
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"model":%q,"input":["ping"],"input_type":"query"}`, EmbedderModel)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/embeddings", bytes.NewBufferString(body))
	if err != nil {
		t.Fatalf("RAGENT_TEST_EMBEDDER_URL: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	requireOK(t, "embedder", req)
	return base
}

// requireOK sends req and fails or skips t (as unavailable does) unless
// the answer is 200.
func requireOK(t testing.TB, service string, req *http.Request) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		unavailable(t, service, err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		unavailable(t, service, fmt.Errorf("%s %s: %s: %s", req.Method, req.URL, resp.Status, msg))
	}
}
