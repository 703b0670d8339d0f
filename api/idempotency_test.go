package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/idempotent"
	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// guarded is a test server with one slow guarded route: POST /things
// answers 201 with the body it read once release is closed (or at once when
// it is nil), counting executions.
type guarded struct {
	srv      *httptest.Server
	rdb      redis.UniversalClient
	prefix   string
	runs     atomic.Int32
	entered  chan struct{}
	release  chan struct{}
	status   atomic.Int32 // status the handler answers; 0 means 201
	panicOne atomic.Bool
}

func newGuarded(t *testing.T, rdb redis.UniversalClient, lockTTL time.Duration) *guarded {
	t.Helper()
	g := &guarded{rdb: rdb, prefix: testenv.Prefix(t), entered: make(chan struct{}, 100)}
	s := &Server{deps: Deps{
		MaxBodyBytes: 1 << 10,
		Locks:        idempotent.NewLocks(rdb, g.prefix, lockTTL, idempotent.Config{}),
		Responses:    idempotent.NewResponses(rdb, g.prefix, time.Minute, time.Hour, idempotent.Config{}),
	}}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(recovery(), func(c *gin.Context) {
		// Stand-in for authenticate: the user id comes from a header.
		var id service.ID = 7
		if h := c.GetHeader("X-User"); h != "" {
			id, _ = service.ParseID(h)
		}
		c.Set(ctxPrincipal, service.Principal{UserID: id})
	})
	handler := func(c *gin.Context) {
		g.runs.Add(1)
		g.entered <- struct{}{}
		if g.release != nil {
			<-g.release
		}
		if g.panicOne.CompareAndSwap(true, false) {
			panic("boom")
		}
		b, _ := io.ReadAll(c.Request.Body)
		status := int(g.status.Load())
		if status == 0 {
			status = http.StatusCreated
		}
		c.JSON(status, gin.H{"run": g.runs.Load(), "body": string(b)})
	}
	r.POST("/things", s.idempotent, handler)
	r.POST("/stream", s.submitLock, handler)
	g.srv = httptest.NewServer(r)
	t.Cleanup(g.srv.Close)
	return g
}

type result struct {
	status int
	header http.Header
	body   string
}

func (g *guarded) post(t *testing.T, path, body string, headers ...string) result {
	t.Helper()
	req, _ := http.NewRequest("POST", g.srv.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Errorf("POST %s: %v", path, err)
		return result{}
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return result{resp.StatusCode, resp.Header, string(b)}
}

func code(body string) string {
	var e errorBody
	_ = json.Unmarshal([]byte(body), &e)
	return e.Error.Code
}

func (g *guarded) submitKeys(t *testing.T) int {
	t.Helper()
	keys, err := g.rdb.Keys(context.Background(), g.prefix+"idem:submit:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return len(keys)
}

func waitEntered(t *testing.T, g *guarded) {
	t.Helper()
	select {
	case <-g.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never ran")
	}
}

func TestConcurrentIdenticalSubmitsRunOnce(t *testing.T) {
	g := newGuarded(t, testenv.Redis(t), 5*time.Second)
	g.release = make(chan struct{})
	const n = 50
	results := make(chan result, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		// Key order and spacing differ; the canonical body is the same.
		body := `{"a":1,"b":[1,2]}`
		if i%2 == 1 {
			body = `{ "b": [1, 2], "a": 1 }`
		}
		wg.Go(func() {
			<-start
			results <- g.post(t, "/things", body)
		})
	}
	close(start)
	waitEntered(t, g)
	// Every duplicate is refused while the first still runs.
	dups := 0
	for range n - 1 {
		select {
		case r := <-results:
			if r.status != http.StatusConflict || code(r.body) != "duplicate_request" {
				t.Fatalf("duplicate got %d %s, want 409 duplicate_request", r.status, r.body)
			}
			dups++
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d duplicates answered", dups)
		}
	}
	close(g.release)
	wg.Wait()
	close(results)
	if r := <-results; r.status != http.StatusCreated {
		t.Fatalf("the first request got %d %s", r.status, r.body)
	}
	if runs := g.runs.Load(); runs != 1 {
		t.Fatalf("handler ran %d times, want 1", runs)
	}
	if n := g.submitKeys(t); n != 0 {
		t.Fatalf("%d submit locks left after the request", n)
	}
	// Another user's identical request, or a different body, is not a duplicate.
	g.release = nil
	if r := g.post(t, "/things", `{"a":1,"b":[1,2]}`, "X-User", "8"); r.status != http.StatusCreated {
		t.Fatalf("other user: %d", r.status)
	}
}

func TestWatchdogKeepsLockPastItsTTL(t *testing.T) {
	const ttl = 300 * time.Millisecond
	g := newGuarded(t, testenv.Redis(t), ttl)
	g.release = make(chan struct{})
	first := make(chan result, 1)
	go func() { first <- g.post(t, "/stream", `{"q":"slow"}`) }()
	waitEntered(t, g)

	time.Sleep(3 * ttl) // well past the lock's initial TTL
	if n := g.submitKeys(t); n != 1 {
		t.Fatalf("%d submit locks while the slow request runs, want 1 (the watchdog must renew it)", n)
	}
	if r := g.post(t, "/stream", `{"q":"slow"}`); r.status != http.StatusConflict || code(r.body) != "duplicate_request" {
		t.Fatalf("duplicate after %v: %d %s, want 409 duplicate_request", 3*ttl, r.status, r.body)
	}
	close(g.release)
	if r := <-first; r.status != http.StatusCreated || !strings.Contains(r.body, `{\"q\":\"slow\"}`) {
		t.Fatalf("slow request: %d %s (the handler must read the restored body)", r.status, r.body)
	}
	if n := g.submitKeys(t); n != 0 {
		t.Fatalf("%d submit locks left after the request", n)
	}
	g.release = nil
	if r := g.post(t, "/stream", `{"q":"slow"}`); r.status != http.StatusCreated {
		t.Fatalf("the same request after release: %d, want 201", r.status)
	}
}

func TestIdempotencyKey(t *testing.T) {
	g := newGuarded(t, testenv.Redis(t), 5*time.Second)
	key := []string{IdempotencyKeyHeader, "k-" + testenv.RandomSuffix()}

	first := g.post(t, "/things", `{"a":1}`, key...)
	if first.status != http.StatusCreated {
		t.Fatalf("first: %d %s", first.status, first.body)
	}
	waitEntered(t, g)
	replay := g.post(t, "/things", `{ "a" : 1 }`, key...)
	if replay.status != http.StatusCreated || replay.body != first.body || replay.header.Get(ReplayedHeader) != "true" ||
		replay.header.Get("Content-Type") != first.header.Get("Content-Type") {
		t.Fatalf("replay: %d %q %v; want the first response replayed", replay.status, replay.body, replay.header)
	}
	if first.header.Get(ReplayedHeader) != "" {
		t.Fatal("the original response is marked replayed")
	}
	if r := g.post(t, "/things", `{"a":2}`, key...); r.status != http.StatusUnprocessableEntity || code(r.body) != "idempotency_key_reused" {
		t.Fatalf("same key, other payload: %d %s, want 422", r.status, r.body)
	}
	if r := g.post(t, "/things", `{"a":1}`, IdempotencyKeyHeader, strings.Repeat("x", idempotent.MaxKeyLen+1)); r.status != http.StatusBadRequest {
		t.Fatalf("oversized key: %d, want 400", r.status)
	}
	if runs := g.runs.Load(); runs != 1 {
		t.Fatalf("handler ran %d times, want 1", runs)
	}

	t.Run("in flight", func(t *testing.T) {
		g.release = make(chan struct{})
		defer func() { g.release = nil }()
		k := []string{IdempotencyKeyHeader, "k-" + testenv.RandomSuffix()}
		done := make(chan result, 1)
		go func() { done <- g.post(t, "/things", `{"b":1}`, k...) }()
		waitEntered(t, g)
		if r := g.post(t, "/things", `{"b":1}`, k...); r.status != http.StatusConflict || code(r.body) != "duplicate_request" {
			t.Fatalf("key in flight: %d %s, want 409", r.status, r.body)
		}
		close(g.release)
		if r := <-done; r.status != http.StatusCreated {
			t.Fatalf("first: %d", r.status)
		}
	})

	t.Run("4xx is replayed, 5xx and panics are not", func(t *testing.T) {
		for _, tc := range []struct {
			status int
			panics bool
			replay bool
		}{{http.StatusBadRequest, false, true}, {http.StatusInternalServerError, false, false}, {0, true, false}} {
			k := []string{IdempotencyKeyHeader, "k-" + testenv.RandomSuffix()}
			g.status.Store(int32(tc.status))
			g.panicOne.Store(tc.panics)
			before := g.runs.Load()
			g.post(t, "/things", `{"c":1}`, k...)
			waitEntered(t, g)
			g.status.Store(0)
			r := g.post(t, "/things", `{"c":1}`, k...)
			if replayed := r.header.Get(ReplayedHeader) == "true"; replayed != tc.replay {
				t.Fatalf("status %d panic %v: replayed=%v, want %v", tc.status, tc.panics, replayed, tc.replay)
			}
			if !tc.replay {
				waitEntered(t, g)
				if g.runs.Load() != before+2 || r.status != http.StatusCreated {
					t.Fatalf("status %d panic %v: the retry did not run again (%d)", tc.status, tc.panics, r.status)
				}
			}
		}
	})

	t.Run("submitLock does not replay", func(t *testing.T) {
		k := []string{IdempotencyKeyHeader, "k-" + testenv.RandomSuffix()}
		before := g.runs.Load()
		for range 2 {
			if r := g.post(t, "/stream", `{"d":1}`, k...); r.status != http.StatusCreated || r.header.Get(ReplayedHeader) != "" {
				t.Fatalf("stream: %d replayed=%q", r.status, r.header.Get(ReplayedHeader))
			}
			waitEntered(t, g)
		}
		if g.runs.Load() != before+2 {
			t.Fatal("a streamed route was replayed instead of run")
		}
	})

	t.Run("body cap", func(t *testing.T) {
		big := fmt.Sprintf(`{"x":%q}`, strings.Repeat("y", 2<<10))
		if r := g.post(t, "/things", big); r.status != http.StatusRequestEntityTooLarge {
			t.Fatalf("oversized body: %d, want 413", r.status)
		}
	})
}

func TestRedisDownRequestsProceed(t *testing.T) {
	addr := testenv.FreeAddr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr, DialTimeout: 200 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	g := newGuarded(t, rdb, time.Second)
	for range 2 {
		if r := g.post(t, "/things", `{"a":1}`, IdempotencyKeyHeader, "k"); r.status != http.StatusCreated {
			t.Fatalf("with redis down: %d %s, want the request served", r.status, r.body)
		}
		waitEntered(t, g)
	}
}
