package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ragent-go/ragent/idgen"
	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/repository"
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
		var n int
		if err := db.QueryRow(ctx, "SELECT count(*) FROM outbox WHERE "+where).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
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
