package testenv

import (
	"context"
	"fmt"
	"io"
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
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		unavailable(t, "opensearch", err)
		return ""
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		unavailable(t, "opensearch", fmt.Errorf("GET %s/: %s: %s", base, resp.Status, msg))
	}
	return base
}
