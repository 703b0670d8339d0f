package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/llm"
)

// limitedReranker is a /rerank provider of our own that enforces, per
// sliding window, at most rpw requests and tpw tokens (counted as ragent
// counts a rerank call, llm.RerankTokens), and answers 429 with
// x-ratelimit-* headers above them. It scores document i 100+i, so a
// search whose results carry such scores was reranked.
type limitedReranker struct {
	srv      *httptest.Server
	rpw, tpw int // 0 = unlimited
	window   time.Duration

	mu                 sync.Mutex
	log                []spent // accepted calls of the last window
	accepted, refused  int
	lastTokens         int
	maxSeenRequests    int // most calls, accepted or not, that arrived within one window
	arrivals           []time.Time
	maxAcceptedTokens  int // most tokens accepted within one window
	maxAcceptedRequest int // most calls accepted within one window
}

func newLimitedReranker(t *testing.T, window time.Duration) *limitedReranker {
	f := &limitedReranker{window: window}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *limitedReranker) serve(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Query     string   `json:"query"`
		Documents []string `json:"documents"`
	}
	if r.URL.Path != "/rerank" || json.NewDecoder(r.Body).Decode(&req) != nil {
		http.Error(w, "bad rerank request", http.StatusBadRequest)
		return
	}
	cost := llm.RerankTokens(req.Query, req.Documents)
	now := time.Now()
	f.mu.Lock()
	var used int
	f.log, used = inWindow(f.log, now, f.window)
	for len(f.arrivals) > 0 && now.Sub(f.arrivals[0]) >= f.window {
		f.arrivals = f.arrivals[1:]
	}
	f.arrivals = append(f.arrivals, now)
	f.maxSeenRequests = max(f.maxSeenRequests, len(f.arrivals))
	if f.rpw > 0 && len(f.log) >= f.rpw || f.tpw > 0 && used+cost > f.tpw {
		f.refused++
		reset := resetIn(f.log, now, f.window)
		f.mu.Unlock()
		rateLimited(w, reset, "rerank")
		return
	}
	f.accepted++
	f.lastTokens = cost
	f.log = append(f.log, spent{now, cost})
	f.maxAcceptedRequest = max(f.maxAcceptedRequest, len(f.log))
	f.maxAcceptedTokens = max(f.maxAcceptedTokens, used+cost)
	f.mu.Unlock()
	type result struct {
		Index int     `json:"index"`
		Score float64 `json:"relevance_score"`
	}
	out := make([]result, len(req.Documents))
	for i := range out {
		out[i] = result{i, float64(100 + i)}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"results": out})
}

// reset starts the counts afresh with limits rpw and tpw.
func (f *limitedReranker) reset(rpw, tpw int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rpw, f.tpw = rpw, tpw
	f.log, f.arrivals = nil, nil
	f.accepted, f.refused, f.maxSeenRequests, f.maxAcceptedTokens, f.maxAcceptedRequest = 0, 0, 0, 0, 0
}

// TestRerankBudget sends more searches at once than the reranker's
// provider allows per window, from two instances sharing Redis. With the
// reranker's budget set to the provider's requests per window, the
// provider sees no more than the budget and refuses (almost) nothing; with
// the tokens budget set twice what the provider allows (another client on
// the key), its 429s shrink the shared budget and the calls queue again.
// Either way every search comes back reranked: no refusal reached a
// caller (a failed rerank would fall back to the fused order, without the
// reranker's scores).
func TestRerankBudget(t *testing.T) {
	// The provider counts a window a third shorter than ragent's budget:
	// a budget set below the provider's figure, as the docs advise, so a
	// call's trip to the provider (which shifts the windows of the two
	// clocks) does not draw a 429. The margin is 1 s: on a loaded machine
	// (load 12 on 2 cores) two calls' trips from grant to provider differed
	// by more than the 0.3 s a tenth left, and the provider saw 7 calls in
	// one of its windows for a budget of 6.
	const window = 3 * time.Second
	f := newLimitedReranker(t, window*2/3)
	cfg := testConfig(t)
	cfg.RerankModel, cfg.RerankBaseURL = "test-rerank", f.srv.URL
	cfg.BudgetWindow, cfg.ChatMaxWait, cfg.ChatPollInterval = window, 2*time.Minute, 20*time.Millisecond

	// An instance without a budget loads the documents, and one search
	// measures a call's tokens.
	in := start(t, cfg)
	c := in.client(t, in.login(t, "admin", "admin-password"))
	kb := c.createKB("rerank budget")
	for i := range 10 {
		c.waitReady(c.uploadAccepted(kb, fmt.Sprintf("r%02d.md", i), fmt.Appendf(nil, "Gadget manual page %d.\n", i)).ID)
	}
	search := func(c *client) (reranked bool, status int, body string) {
		r := c.do("POST", "/api/v1/search", map[string]any{"query": "gadget manual", "knowledgeBaseIds": []string{kb}, "mode": "keyword", "topK": 10})
		var out struct{ Results []struct{ Score float64 } }
		if r.Status == http.StatusOK {
			r.json(t, &out)
		}
		return len(out.Results) > 0 && out.Results[0].Score >= 100, r.Status, string(r.Body)
	}
	if ok, status, body := search(c); !ok {
		t.Fatalf("search not reranked: %d %s", status, body)
	}
	f.mu.Lock()
	perCall := f.lastTokens
	f.mu.Unlock()

	// run sends searches at once over two instances whose reranker budget
	// is rpm requests and tpm calls' tokens per window, against the
	// provider's limits of provRPW requests and provTPW calls' tokens.
	run := func(t *testing.T, prefix string, rpm, tpm, provRPW, provTPW, searches int) (maxSeen, refused int) {
		cfg := cfg
		cfg.RedisPrefix += prefix
		cfg.RerankRequestsPerMinute, cfg.RerankTokensPerMinute = rpm, tpm*perCall
		ins := []*instance{start(t, cfg), start(t, cfg)}
		admin := ins[0].login(t, "admin", "admin-password")
		f.reset(provRPW, provTPW*perCall)
		var wg sync.WaitGroup
		var mu sync.Mutex
		var failed []string
		for i := range searches {
			c := ins[i%2].client(t, admin)
			wg.Go(func() {
				if ok, status, body := search(c); !ok {
					mu.Lock()
					failed = append(failed, fmt.Sprintf("%d %.200s", status, body))
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		f.mu.Lock()
		defer f.mu.Unlock()
		t.Logf("budget %d requests, %d tokens (a call %d); provider %d, %d: %d searches, provider accepted %d, refused %d; most in one window: %d arrived, %d accepted, %d tokens accepted",
			rpm, tpm*perCall, perCall, provRPW, provTPW*perCall, searches, f.accepted, f.refused, f.maxSeenRequests, f.maxAcceptedRequest, f.maxAcceptedTokens)
		if len(failed) > 0 {
			t.Fatalf("%d of %d searches not reranked (a refusal reached the caller): %v", len(failed), searches, failed[0])
		}
		if f.accepted != searches {
			t.Fatalf("the provider answered %d calls for %d searches", f.accepted, searches)
		}
		// The reranker's budget has the series of every endpoint's, and
		// counts the 429s it absorbed.
		throttled := 0.0
		for _, in := range ins {
			m := string(in.client(t, "").do("GET", "/metrics", nil).Body)
			if !strings.Contains(m, `ratelimit_budget_limit{dimension="requests",limiter="rerank"}`) {
				t.Fatalf("no ratelimit_budget_limit series of the rerank budget in /metrics")
			}
			throttled += metricValue(t, m, `ratelimit_provider_throttled_total{limiter="rerank"}`)
		}
		if int(throttled) != f.refused {
			t.Fatalf("ratelimit_provider_throttled_total{limiter=\"rerank\"} sums to %v over the instances, the provider refused %d", throttled, f.refused)
		}
		return f.maxSeenRequests, f.refused
	}
	t.Run("requests", func(t *testing.T) {
		// The budget is the provider's: the calls arriving within any
		// window stay within it, so nothing is refused.
		if seen, refused := run(t, "rq:", 6, 0, 6, 0, 24); seen > 6 || refused > 0 {
			t.Fatalf("%d calls arrived within one window for a budget of 6; %d refused", seen, refused)
		}
	})
	t.Run("tokens over the provider", func(t *testing.T) {
		// ragent is told twice the tokens the provider allows (another
		// client on the key): the provider's 429s shrink the shared
		// budget and the calls queue again.
		if _, refused := run(t, "tk:", 0, 8, 0, 4, 24); refused == 0 {
			t.Fatal("the provider refused nothing: the test did not exercise 429s")
		}
	})
}

// metricValue is the value of the series line (name and labels) in the
// /metrics text m; 0 when absent.
func metricValue(t *testing.T, m, series string) float64 {
	t.Helper()
	for line := range strings.SplitSeq(m, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}
