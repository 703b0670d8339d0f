package testenv

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// defaultOpenSearchURL is where scripts/services.sh start opensearch runs
// its single node.
const defaultOpenSearchURL = "http://127.0.0.1:9200"

// OpenSearchURL returns the base URL of the test OpenSearch node
// (RAGENT_TEST_OPENSEARCH_URL), failing or skipping when GET / does not
// answer 200.
func OpenSearchURL(t testing.TB) string {
	t.Helper()
	base := strings.TrimRight(env("RAGENT_TEST_OPENSEARCH_URL", defaultOpenSearchURL), "/")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/", nil)
	if err != nil {
		t.Fatalf("RAGENT_TEST_OPENSEARCH_URL: %v", err)
	}
	requireOK(t, "opensearch", req)
	return base
}
