package idempotent_test

import (
	"context"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/ragent-go/ragent/idempotent"
	"github.com/ragent-go/ragent/internal/testenv"
)

const inFlightTTL = time.Minute

func newResponses(t *testing.T) (*idempotent.Responses, string) {
	t.Helper()
	prefix := testenv.Prefix(t)
	return idempotent.NewResponses(testenv.Redis(t), prefix, inFlightTTL, idempotent.DefaultResponseTTL, idempotent.Config{}), prefix
}

func TestResponsesLifecycle(t *testing.T) {
	rdb := testenv.Redis(t)
	reg := prometheus.NewRegistry()
	prefix := testenv.Prefix(t)
	resp := idempotent.NewResponses(rdb, prefix, inFlightTTL, idempotent.DefaultResponseTTL, idempotent.Config{Registerer: reg})
	ctx := context.Background()
	const user, key = "42", "5f0c-create-kb"
	redisKey := prefix + "idem:key:" + user + ":" + key
	hash := idempotent.PayloadHash("POST", "/api/v1/knowledge-bases", []byte(`{"name":"hr"}`))
	otherHash := idempotent.PayloadHash("POST", "/api/v1/knowledge-bases", []byte(`{"name":"it"}`))
	stored := idempotent.Stored{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json; charset=utf-8"}, "Location": {"/api/v1/knowledge-bases/9"}},
		Body:   []byte(`{"id":"9","name":"hr"}`),
	}

	begin := func(t *testing.T, hash string, want idempotent.Outcome) *idempotent.Stored {
		t.Helper()
		got, s, err := resp.Begin(ctx, user, key, hash)
		if err != nil {
			t.Fatalf("Begin: %v", err)
		}
		if got != want {
			t.Fatalf("Begin = %v, want %v", got, want)
		}
		if (s != nil) != (want == idempotent.Replay) {
			t.Fatalf("Begin %v returned stored response %+v", got, s)
		}
		return s
	}

	begin(t, hash, idempotent.Proceed)
	if pttl := rdb.PTTL(ctx, redisKey).Val(); pttl <= inFlightTTL-5*time.Second || pttl > inFlightTTL {
		t.Errorf("in-flight PTTL %v, want ≈ %v", pttl, inFlightTTL)
	}
	begin(t, hash, idempotent.InFlight)
	begin(t, otherHash, idempotent.Mismatch)

	if err := resp.Complete(ctx, user, key, hash, stored); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	if pttl := rdb.PTTL(ctx, redisKey).Val(); pttl <= 24*time.Hour-time.Minute || pttl > 24*time.Hour {
		t.Errorf("stored PTTL %v, want ≈ 24h", pttl)
	}
	for range 2 {
		if got := begin(t, hash, idempotent.Replay); !reflect.DeepEqual(*got, stored) {
			t.Fatalf("replayed %+v, want %+v", *got, stored)
		}
	}
	begin(t, otherHash, idempotent.Mismatch)

	// The first completed response wins; nothing undoes it.
	if err := resp.Complete(ctx, user, key, hash, idempotent.Stored{Status: 500}); !errors.Is(err, idempotent.ErrNotOwner) {
		t.Errorf("second Complete: err = %v, want ErrNotOwner", err)
	}
	if err := resp.Abort(ctx, user, key, hash); !errors.Is(err, idempotent.ErrNotOwner) {
		t.Errorf("Abort after Complete: err = %v, want ErrNotOwner", err)
	}
	begin(t, hash, idempotent.Replay)

	for outcome, want := range map[string]float64{"proceed": 1, "in_flight": 1, "mismatch": 2, "replay": 3} {
		if got := counter(t, reg, "ragent_idempotent_key_outcomes_total", map[string]string{"outcome": outcome}); got != want {
			t.Errorf("key_outcomes_total{outcome=%s} = %v, want %v", outcome, got, want)
		}
	}
}

func TestResponsesAbortThenRetry(t *testing.T) {
	resp, _ := newResponses(t)
	ctx := context.Background()
	const user, key = "1", "retry-me"
	hash := idempotent.PayloadHash("POST", "/api/v1/chat", []byte(`{"question":"vpn"}`))

	if got, _, err := resp.Begin(ctx, user, key, hash); err != nil || got != idempotent.Proceed {
		t.Fatalf("Begin = %v, %v; want Proceed", got, err)
	}
	// Another payload cannot abort the owner's claim.
	if err := resp.Abort(ctx, user, key, "other"); !errors.Is(err, idempotent.ErrNotOwner) {
		t.Fatalf("Abort with another payload: err = %v, want ErrNotOwner", err)
	}
	// The request failed with a 5xx: the client may retry with the same key.
	if err := resp.Abort(ctx, user, key, hash); err != nil {
		t.Fatalf("Abort: %v", err)
	}
	if got, _, err := resp.Begin(ctx, user, key, hash); err != nil || got != idempotent.Proceed {
		t.Fatalf("Begin after Abort = %v, %v; want Proceed", got, err)
	}
	stored := idempotent.Stored{Status: 200, Body: []byte("ok")}
	if err := resp.Complete(ctx, user, key, hash, stored); err != nil {
		t.Fatalf("Complete: %v", err)
	}
	got, s, err := resp.Begin(ctx, user, key, hash)
	if err != nil || got != idempotent.Replay || s.Status != 200 || string(s.Body) != "ok" || s.Header != nil {
		t.Fatalf("Begin after Complete = %v, %+v, %v; want Replay of %+v", got, s, err, stored)
	}
}

func TestResponsesCompleteAfterClaimExpired(t *testing.T) {
	rdb := testenv.Redis(t)
	prefix := testenv.Prefix(t)
	resp := idempotent.NewResponses(rdb, prefix, 50*time.Millisecond, idempotent.DefaultResponseTTL, idempotent.Config{})
	ctx := context.Background()
	const user, key = "1", "slow"

	if got, _, err := resp.Begin(ctx, user, key, "a"); err != nil || got != idempotent.Proceed {
		t.Fatalf("Begin a = %v, %v; want Proceed", got, err)
	}
	testenv.Eventually(t, 2*time.Second, "the in-flight claim to expire", func() bool {
		return rdb.Exists(ctx, prefix+"idem:key:1:slow").Val() == 0
	})
	// A request with another payload reuses the key after the claim expired.
	if got, _, err := resp.Begin(ctx, user, key, "b"); err != nil || got != idempotent.Proceed {
		t.Fatalf("Begin b = %v, %v; want Proceed", got, err)
	}
	if err := resp.Complete(ctx, user, key, "a", idempotent.Stored{Status: 201}); !errors.Is(err, idempotent.ErrNotOwner) {
		t.Fatalf("late Complete of a: err = %v, want ErrNotOwner", err)
	}
	if got, _, err := resp.Begin(ctx, user, key, "b"); err != nil || got != idempotent.InFlight {
		t.Fatalf("Begin b = %v, %v; want InFlight (a's late response must not land)", got, err)
	}
}

func TestResponsesConcurrentBeginOneProceeds(t *testing.T) {
	resp, _ := newResponses(t)
	ctx := context.Background()
	const n = 20
	var (
		mu      sync.Mutex
		results = map[idempotent.Outcome]int{}
	)
	testenv.Together(n, func(int) {
		got, _, err := resp.Begin(ctx, "1", "double-click", "h")
		if err != nil {
			t.Errorf("Begin: %v", err)
			return
		}
		mu.Lock()
		results[got]++
		mu.Unlock()
	})
	if results[idempotent.Proceed] != 1 || results[idempotent.InFlight] != n-1 {
		t.Fatalf("outcomes %v; want 1 proceed and %d in flight", results, n-1)
	}
}

func TestResponsesKeysArePerUser(t *testing.T) {
	resp, _ := newResponses(t)
	ctx := context.Background()
	for _, user := range []string{"1", "2"} {
		if got, _, err := resp.Begin(ctx, user, "same-key", "h-"+user); err != nil || got != idempotent.Proceed {
			t.Fatalf("user %s: Begin = %v, %v; want Proceed", user, got, err)
		}
	}
}

func TestResponsesInvalidKey(t *testing.T) {
	resp, _ := newResponses(t)
	for name, key := range map[string]string{
		"empty":    "",
		"too long": strings.Repeat("k", idempotent.MaxKeyLen+1),
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := resp.Begin(context.Background(), "1", key, "h"); !errors.Is(err, idempotent.ErrInvalidKey) {
				t.Fatalf("Begin: err = %v, want ErrInvalidKey", err)
			}
		})
	}
	longest := strings.Repeat("k", idempotent.MaxKeyLen)
	if got, _, err := resp.Begin(context.Background(), "1", longest, "h"); err != nil || got != idempotent.Proceed {
		t.Fatalf("Begin with a %d-byte key = %v, %v; want Proceed", len(longest), got, err)
	}
}

func TestResponsesRedisErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	resp := idempotent.NewResponses(unreachableRedis(t), "p:", time.Minute, time.Hour, idempotent.Config{Registerer: reg})
	ctx := context.Background()
	calls := map[string]func() error{
		"begin": func() error {
			_, _, err := resp.Begin(ctx, "1", "k", "h")
			return err
		},
		"complete": func() error { return resp.Complete(ctx, "1", "k", "h", idempotent.Stored{Status: 200}) },
		"abort":    func() error { return resp.Abort(ctx, "1", "k", "h") },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			if err := call(); !errors.Is(err, idempotent.ErrUnavailable) {
				t.Fatalf("err = %v, want ErrUnavailable", err)
			}
		})
	}
	if got := counter(t, reg, "ragent_idempotent_redis_errors_total", map[string]string{"component": "key"}); got != float64(len(calls)) {
		t.Errorf("redis_errors_total{component=key} = %v, want %d", got, len(calls))
	}
}
