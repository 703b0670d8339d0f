package llm

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

func TestRerank(t *testing.T) {
	var calls atomic.Int32
	var got rerankRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			http.Error(w, "warming up", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/v1/rerank" || r.Header.Get("Authorization") != "Bearer rk" {
			t.Errorf("path %s auth %q", r.URL.Path, r.Header.Get("Authorization"))
		}
		_ = json.NewDecoder(r.Body).Decode(&got)
		// Best first, as the services answer; one document left out.
		_, _ = w.Write([]byte(`{"results":[{"index":2,"relevance_score":0.9},{"index":0,"relevance_score":0.4}]}`))
	}))
	t.Cleanup(srv.Close)

	rr := NewReranker(srv.URL+"/v1", "rk", "bge-reranker", Config{BackoffBase: 10 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	scores, err := rr.Rerank(context.Background(), "q", []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	if len(scores) != 3 || scores[0] != 0.4 || !math.IsInf(scores[1], -1) || scores[2] != 0.9 {
		t.Fatalf("scores %v", scores)
	}
	if got.Model != "bge-reranker" || got.Query != "q" || got.TopN != 3 || len(got.Documents) != 3 || calls.Load() != 2 {
		t.Fatalf("request %+v after %d calls", got, calls.Load())
	}

	if s, err := rr.Rerank(context.Background(), "q", nil); err != nil || s != nil {
		t.Fatalf("no documents: %v %v", s, err)
	}
}

func TestRerankBadIndex(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"results":[{"index":7,"relevance_score":0.9}]}`))
	}))
	t.Cleanup(srv.Close)
	_, err := NewReranker(srv.URL+"/rerank", "", "m", Config{}).Rerank(context.Background(), "q", []string{"a"})
	if !errors.Is(err, service.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}
