package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ragent-go/ragent/idgen"
	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/mq/redisstream"
	"github.com/ragent-go/ragent/repository"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/ingest"
)

// The reaper deletes outbox rows sent before the retention, in batches, and
// never an unsent row. Uploads go through a real instance (upload → outbox →
// relay); the reaper then runs on the same database with a clock moved past
// the retention, so nothing waits for time to pass.
func TestReaperPrunesSentOutbox(t *testing.T) {
	cfg := testConfig(t)
	in, admin, kb := ingestEnv(t, cfg)
	for i := range 3 {
		d := admin.uploadAccepted(kb, fmt.Sprintf("prune-%d.txt", i), []byte(fmt.Sprintf("Outbox pruning document number %d.", i)))
		admin.waitReady(d.ID)
	}
	ctx := context.Background()
	db := connectDB(t, cfg.DatabaseURL)
	count := func(where string) int {
		t.Helper()
		return countRows(t, db, "SELECT count(*) FROM outbox WHERE "+where)
	}
	// Ready documents were delivered, but the relay marks a row sent in a
	// transaction that may commit just after the consumer finished.
	testenv.Eventually(t, 30*time.Second, "the relay to send every outbox row", func() bool {
		return count("sent_at IS NULL") == 0
	})
	// No relay from here on, so a row written now stays unsent: the MQ was
	// down when it should have gone out.
	in.stop()
	if _, err := db.Exec(ctx, `INSERT INTO outbox (id, topic, key, payload, created_at)
		VALUES (1, 'ingest', 'stranded', '{}', now() - interval '30 days')`); err != nil {
		t.Fatal(err)
	}
	sent := count("sent_at IS NOT NULL")
	if sent != 3 {
		t.Fatalf("%d sent outbox rows, want 3", sent)
	}

	store, err := repository.Open(ctx, cfg.DatabaseURL, repository.Config{Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	now := time.Now()
	ids := idSource{idgen.New(1023, idgen.Config{})}
	reaper := ingest.New(store, nil, nil, ids, nil, ingest.Config{OutboxRetention: cfg.OutboxRetention, PruneBatch: 2,
		Logger: testLogger(t), Now: func() time.Time { return now }})

	// Within the retention nothing goes.
	if err := reaper.ReapOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got := count("sent_at IS NOT NULL"); got != sent {
		t.Fatalf("reaper within the retention left %d of %d sent rows", got, sent)
	}
	// Past it, every sent row goes in one round (two batches of at most
	// two), and the unsent row stays however old it is.
	now = now.Add(cfg.OutboxRetention + time.Minute)
	if err := reaper.ReapOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if got, unsent := count("sent_at IS NOT NULL"), count("sent_at IS NULL"); got != 0 || unsent != 1 {
		t.Fatalf("after the retention: %d sent and %d unsent rows, want 0 and 1", got, unsent)
	}
}

// TestPendingRepublishedAfterRedisLoss loses the MQ's messages as a Redis
// restarted without persistence does: the outbox rows are sent, the stream
// (and every other key of the instance) is gone, the documents are pending.
// The reaper publishes them again after RAGENT_INGEST_PENDING_TIMEOUT and a
// worker ingests each once, whatever duplicates the reaper sent meanwhile.
func TestPendingRepublishedAfterRedisLoss(t *testing.T) {
	cfg := testConfig(t)
	cfg.Role = "api" // no consumer yet: the messages wait in the stream
	cfg.IngestPendingTimeout = 2 * time.Second
	// The relay's own check of what Redis holds (RAGENT_INGEST_CONFIRM_AFTER)
	// would find the lost messages too; kept out of the way, the reaper is
	// what brings them back, as it must for a queue that cannot be asked.
	cfg.IngestConfirmAfter = time.Hour
	_, c, kb := ingestEnv(t, cfg)
	const n = 12
	var docs []docJSON
	for i := range n {
		docs = append(docs, c.uploadAccepted(kb, fmt.Sprintf("lost-%d.txt", i),
			[]byte(fmt.Sprintf("Document %d about lighthouse keepers on stormy coasts, whose message Redis lost.", i))))
	}
	ctx := context.Background()
	db := connectDB(t, cfg.DatabaseURL)
	count := func(query string) int { t.Helper(); return countRows(t, db, query) }
	rdb := testenv.Redis(t)
	stream := redisstream.StreamKey(cfg.RedisPrefix, service.IngestTopic)
	testenv.Eventually(t, 30*time.Second, "the relay to publish every upload", func() bool {
		return count("SELECT count(*) FROM outbox WHERE sent_at IS NULL") == 0 && rdb.XLen(ctx, stream).Val() >= n
	})

	// Redis restarts empty: every key under the prefix goes.
	keys, err := rdb.Keys(ctx, cfg.RedisPrefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys under the prefix: %v, %v", keys, err)
	}
	if err := rdb.Del(ctx, keys...).Err(); err != nil {
		t.Fatal(err)
	}
	if got := count("SELECT count(*) FROM documents WHERE status = 'pending'"); got != n {
		t.Fatalf("%d pending documents after the loss, want %d", got, n)
	}

	workerIndexesOnce(t, cfg, c, 90*time.Second, docs...)
	if got := count("SELECT count(*) FROM outbox WHERE topic = '" + service.IngestTopic + "'"); got <= n {
		t.Fatalf("%d ingest outbox rows for %d documents: nothing was re-published", got, n)
	}
	if got := count("SELECT count(*) FROM chunks"); got != count("SELECT sum(chunk_count) FROM documents") {
		t.Fatalf("%d chunk rows, documents count %d", got, count("SELECT sum(chunk_count) FROM documents"))
	}
}

// TestRedeliveryAfterLostConsumeMark loses a document's consume mark the way
// a failover does (the promoted replica never received CONSUMED) and delivers
// its message again: the guard lets the duplicate through, and the database
// keeps it from becoming a second chunk set — the document stays ready, of
// the same generation, with one set of chunks.
func TestRedeliveryAfterLostConsumeMark(t *testing.T) {
	cfg := testConfig(t)
	_, c, kb := ingestEnv(t, cfg)
	d := c.uploadAccepted(kb, "twice.txt", []byte("A document about tide tables, delivered twice because Redis forgot it was consumed."))
	ready := c.waitDone(d.ID, 60*time.Second)
	if ready.Status != "ready" {
		t.Fatalf("document %s: %+v", d.ID, ready)
	}
	checkOneChunkSet(t, c, ready)

	ctx := context.Background()
	db := connectDB(t, cfg.DatabaseURL)
	var key string
	var body []byte
	if err := db.QueryRow(ctx, `SELECT key, payload FROM outbox WHERE topic = $1`, service.IngestTopic).Scan(&key, &body); err != nil {
		t.Fatal(err)
	}
	rdb := testenv.Redis(t)
	marks, err := testenv.Keys(ctx, rdb, cfg.RedisPrefix+"idem:consume:*")
	if err != nil || len(marks) != 1 {
		t.Fatalf("consume marks: %v, %v; want the document's one", marks, err)
	}
	if err := rdb.Del(ctx, marks[0]).Err(); err != nil {
		t.Fatal(err)
	}
	if err := redisstream.NewProducer(rdb, redisstream.ProducerConfig{Prefix: cfg.RedisPrefix}).Publish(ctx, service.IngestTopic, key, body); err != nil {
		t.Fatal(err)
	}
	// The guard marks the message consumed again once the duplicate ran.
	testenv.Eventually(t, 60*time.Second, "the duplicate to be consumed", func() bool {
		return rdb.Get(ctx, marks[0]).Val() == "CONSUMED"
	})
	again := c.document(d.ID)
	if again.Status != "ready" || again.Generation != ready.Generation || again.ChunkCount != ready.ChunkCount {
		t.Fatalf("after the duplicate: %+v, before: %+v", again, ready)
	}
	checkOneChunkSet(t, c, again)
	var rows int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM chunks`).Scan(&rows); err != nil || rows != ready.ChunkCount {
		t.Fatalf("%d chunk rows (%v), want %d", rows, err, ready.ChunkCount)
	}
}
