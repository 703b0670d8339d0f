package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/idempotent"
	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/mq/redisstream"
	"github.com/ragent-go/ragent/service"
)

// chatStreamKey is chatStream with an Idempotency-Key; a refusal's body is
// returned as its only event's data.
func (c *client) chatStreamKey(ctx context.Context, body map[string]any, key string, onEvent func(sseEvent) bool) (status int, events []sseEvent) {
	c.t.Helper()
	req := jsonRequest(ctx, c.base+"/api/v1/chat", body, "Authorization", "Bearer "+c.token, "Idempotency-Key", key)
	return refusedAsEvent(streamRequest(c.t, req, onEvent))
}

// A submit lock lost in a Redis failover lets a retried submit through to
// the database: with the same Idempotency-Key it follows the first answer
// (same conversation, same task), on another instance too, and the
// database holds one conversation and one question, however often the
// client retries.
func TestChatSubmitKeyAfterLostLock(t *testing.T) {
	llm := newFakeLLM(t)
	cfg := chatConfig(t, llm)
	a, b := start(t, cfg), start(t, cfg)
	token := a.login(t, "admin", "admin-password")
	ca, cb := a.client(t, token), b.client(t, token)
	var me struct {
		ID string `json:"id"`
	}
	ca.do("GET", "/api/v1/me", nil).json(t, &me)
	body := map[string]any{"question": "what did the lost lock guard? #medium"}
	raw, _ := json.Marshal(body)
	lockKey := idempotent.SubmitKey(cfg.RedisPrefix, "/api/v1/chat", me.ID, raw)
	const key = "client-request-7f3a"
	ctx := context.Background()
	rdb := testenv.Redis(t)
	db := connectDB(t, cfg.DatabaseURL)
	count := func(query string) int { t.Helper(); return countRows(t, db, query) }

	firstDone := make(chan []sseEvent, 1)
	go func() {
		_, events := ca.chatStreamKey(ctx, body, key, nil)
		firstDone <- events
	}()
	testenv.Eventually(t, 20*time.Second, "the first submit to store its question", func() bool {
		return count("SELECT count(*) FROM messages WHERE role = 'user'") == 1
	})
	// The failover: the promoted replica never had the lock.
	if n, err := rdb.Del(ctx, lockKey).Result(); err != nil || n != 1 {
		t.Fatalf("delete the submit lock %s: %d, %v (want the first submit to hold it)", lockKey, n, err)
	}
	status, second := cb.chatStreamKey(ctx, body, key, nil)
	first := <-firstDone
	if status != http.StatusOK || len(first) == 0 || len(second) == 0 {
		t.Fatalf("first %v, second %d %v", first, status, second)
	}
	m1, m2 := first[0].json(t), second[0].json(t)
	if first[0].Name != "meta" || second[0].Name != "meta" || m1["conversationId"] != m2["conversationId"] || m1["taskId"] != m2["taskId"] {
		t.Fatalf("the retry is not the first turn: first %v, retry %v", first[0], second[0])
	}
	if got := collapse(second); got != "meta message finish done" && got != "meta sources message finish done" {
		t.Fatalf("the retry's stream %q", got)
	}
	if f := second[len(second)-2].json(t); f["status"] != "completed" {
		t.Fatalf("the retry's finish %v", f)
	}

	// A stream ends just before its request releases the submit lock.
	unlocked := func(body map[string]any) {
		t.Helper()
		raw, _ := json.Marshal(body)
		lock := idempotent.SubmitKey(cfg.RedisPrefix, "/api/v1/chat", me.ID, raw)
		testenv.Eventually(t, 10*time.Second, "the submit lock to be released", func() bool {
			return rdb.Exists(ctx, lock).Val() == 0
		})
	}
	// Once the answer is saved its lock is released: the same key again,
	// on either instance, is still the same turn, never a second one.
	for _, c := range []*client{ca, cb} {
		unlocked(body)
		status, again := c.chatStreamKey(ctx, body, key, nil)
		if status != http.StatusOK || len(again) == 0 || again[0].Name != "meta" || again[0].json(t)["conversationId"] != m1["conversationId"] {
			t.Fatalf("a later retry: %d %v", status, again)
		}
	}
	if n := count("SELECT count(*) FROM conversations"); n != 1 {
		t.Fatalf("%d conversations, want 1", n)
	}
	if n := count("SELECT count(*) FROM messages WHERE role = 'user'"); n != 1 {
		t.Fatalf("%d questions, want 1", n)
	}
	if n := count("SELECT count(*) FROM messages WHERE role = 'assistant'"); n != 1 {
		t.Fatalf("%d answers, want 1", n)
	}

	// A turn that failed may be sent again under its key: the retry asks
	// the model again, in the same conversation.
	failing := map[string]any{"question": "this one fails #500"}
	var convs []any
	for range 2 {
		unlocked(failing)
		status, events := ca.chatStreamKey(ctx, failing, "client-request-failing", nil)
		if status != http.StatusOK || len(events) < 2 || events[len(events)-2].json(t)["status"] != "failed" {
			t.Fatalf("a failing turn: %d %v", status, events)
		}
		convs = append(convs, events[0].json(t)["conversationId"])
	}
	if convs[0] != convs[1] {
		t.Fatalf("the retry of a failed turn went to conversation %v, the turn was in %v", convs[1], convs[0])
	}
	if n := count("SELECT count(*) FROM conversations"); n != 2 {
		t.Fatalf("%d conversations after the failed turn and its retry, want 2", n)
	}
	if n := count("SELECT count(*) FROM messages WHERE role = 'user' AND content LIKE 'this one fails%'"); n != 2 {
		t.Fatalf("%d questions of the failed turn and its retry, want 2", n)
	}

	// Another key is another turn; an oversized key is refused.
	unlocked(body)
	if status, _ := ca.chatStreamKey(ctx, body, "client-request-other", nil); status != http.StatusOK {
		t.Fatalf("a new key: %d", status)
	}
	testenv.Eventually(t, 20*time.Second, "the new key's turn to be saved", func() bool {
		return count("SELECT count(*) FROM conversations") == 3
	})
	unlocked(body)
	if status, _ := ca.chatStreamKey(ctx, body, string(bytes.Repeat([]byte("k"), idempotent.MaxKeyLen+1)), nil); status != http.StatusBadRequest {
		t.Fatalf("an oversized key: %d, want 400", status)
	}
}

// An ingest message whose acknowledged XADD the new primary lost (here: its
// entry deleted from a private Redis right after the relay published it) is
// sent again from the outbox within RAGENT_INGEST_CONFIRM_AFTER, not after
// the pending reaper's 10 minutes: the document ends ready, with one chunk
// set.
func TestLostStreamEntrySentAgain(t *testing.T) {
	cfg := testConfig(t)
	cfg.RedisURL = privateRedis(t)
	cfg.RedisSentinelAddrs, cfg.RedisSentinelMaster, cfg.RedisClusterAddrs = nil, "", nil
	cfg.Role = "api" // no consumer yet: the entry waits in the stream
	cfg.IngestConfirmAfter = 300 * time.Millisecond
	_, c, kb := ingestEnv(t, cfg)
	if cfg.IngestPendingTimeout < 5*time.Minute {
		t.Fatalf("the pending timeout %v would hide what this test checks", cfg.IngestPendingTimeout)
	}
	ctx := context.Background()
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	t.Cleanup(func() { rdb.Close() })
	db := connectDB(t, cfg.DatabaseURL)
	stream := redisstream.StreamKey(cfg.RedisPrefix, service.IngestTopic)

	const docs = 3
	var uploaded []docJSON
	for i := range docs {
		uploaded = append(uploaded, c.uploadAccepted(kb, "lost-entry-"+string(rune('a'+i))+".txt",
			[]byte("Lighthouse keepers on stormy coasts log every ship, the entry of document "+string(rune('a'+i))+" included.")))
	}
	var refs []string
	testenv.Eventually(t, 30*time.Second, "the relay to publish every upload", func() bool {
		refs = refs[:0]
		rows, err := db.Query(ctx, "SELECT sent_ref FROM outbox WHERE topic = $1 AND sent_at IS NOT NULL", service.IngestTopic)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		for rows.Next() {
			var ref string
			if err := rows.Scan(&ref); err != nil {
				t.Fatal(err)
			}
			refs = append(refs, ref)
		}
		return len(refs) == docs
	})
	// The failover: the promoted replica never received these entries.
	for _, ref := range refs {
		if ref == "" {
			t.Fatalf("a published ingest row has no stream entry id: %v", refs)
		}
		if n, err := rdb.XDel(ctx, stream, ref).Result(); err != nil || n != 1 {
			t.Fatalf("XDEL %s: %d, %v", ref, n, err)
		}
	}
	workerIndexesOnce(t, cfg, c, 30*time.Second, uploaded...)
	var lost int
	if err := db.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE topic = $1 AND last_error LIKE '%lost%'", service.IngestTopic).Scan(&lost); err != nil {
		t.Fatal(err)
	}
	if lost != docs {
		t.Fatalf("%d outbox rows record the loss, want %d", lost, docs)
	}
}
