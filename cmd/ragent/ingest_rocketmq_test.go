//go:build !race

// The RocketMQ client library reports data races inside itself, so these
// end-to-end tests are left out of -race builds; the Makefile runs them in
// its non-race test line.

package main

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/mq/rocketmq"
)

// rocketmqConfig is testConfig on the RocketMQ driver. The ingest topic and
// consumer group are fixed names on the shared broker, so these tests run
// one worker at a time, never in parallel.
func rocketmqConfig(t *testing.T) Config {
	t.Helper()
	cfg := testConfig(t)
	cfg.MQDriver = "rocketmq"
	cfg.RocketMQNamesrv = testenv.RocketMQNamesrv(t)
	return cfg
}

func TestIngestRocketMQSameMessageFiveTimes(t *testing.T) {
	cfg := rocketmqConfig(t)
	cfg.Role = "api"
	_, c, kb := ingestEnv(t, cfg)
	d := c.uploadAccepted(kb, "redelivered.txt", []byte(strings.Repeat("Axolotls regrow limbs, hearts and parts of their brains. ", 200)))

	p, err := rocketmq.NewProducer(cfg.RocketMQNamesrv, rocketmq.ProducerConfig{Instance: "test-" + testenv.RandomSuffix()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	publishFiveTimes(t, p, d.ID)

	workerIndexesOnce(t, cfg, c, 90*time.Second, d) // a new push consumer needs a rebalance first
	time.Sleep(2 * time.Second)
	checkOneChunkSet(t, c, c.document(d.ID))
}

// TestIngestRocketMQUnreachableAtUpload uploads while the NameServer cannot
// be reached: the upload still succeeds (the outbox keeps the message) and
// the document is ingested once an instance reaches the MQ.
func TestIngestRocketMQUnreachableAtUpload(t *testing.T) {
	cfg := rocketmqConfig(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there now

	down := cfg
	down.RocketMQNamesrv = deadAddr
	down.Role = "api"
	in, c, kb := ingestEnv(t, down)
	// A failure below says where the message stopped: never published
	// (the relay's attempts, error and claim) or published and not consumed.
	db := connectDB(t, cfg.DatabaseURL)
	t.Cleanup(func() {
		if t.Failed() {
			logOutbox(t, db)
		}
	})
	d := c.uploadAccepted(kb, "outbox.txt", []byte("Narwhal tusks are elongated teeth with millions of nerve endings."))
	time.Sleep(2 * time.Second) // a few relay rounds fail meanwhile
	if st := c.document(d.ID).Status; st != "pending" {
		t.Fatalf("status %s while the MQ is down, want pending", st)
	}
	in.stop()

	// The MQ is reachable again: a new instance relays the outbox row and
	// consumes it.
	up := cfg
	up.Role = "all"
	in = start(t, up)
	c = in.adminClient(t)
	got := c.waitDone(d.ID, 90*time.Second)
	if got.Status != "ready" {
		t.Fatalf("document: %+v", got)
	}
	if !hasDocument(c.search(kb, "narwhal tusks", "keyword"), d.ID) {
		t.Fatal("not searchable")
	}
}

// logOutbox logs the outbox rows of the test's database: whether each was
// sent, the relay's attempts, last error and claim.
func logOutbox(t *testing.T, db *pgx.Conn) {
	rows, err := db.Query(context.Background(), `SELECT id, topic, key, sent_at IS NOT NULL, attempts, last_error,
		coalesce(to_char(claimed_until, 'HH24:MI:SS.MS'), '-'), to_char(now(), 'HH24:MI:SS.MS') FROM outbox ORDER BY id`)
	if err != nil {
		t.Logf("outbox: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id                         int64
			attempts                   int
			sent                       bool
			topic, key, lastErr, until string
			now                        string
		)
		if err := rows.Scan(&id, &topic, &key, &sent, &attempts, &lastErr, &until, &now); err != nil {
			t.Logf("outbox: %v", err)
			return
		}
		t.Logf("outbox row %d %s %s: sent %v, attempts %d, last error %q, claimed until %s (now %s)", id, topic, key, sent, attempts, lastErr, until, now)
	}
}
