package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// fairInstances starts instances "a" and "b" of cfg and returns them.
func fairInstances(t *testing.T, cfg Config) [2]*instance {
	t.Helper()
	var ins [2]*instance
	for i, name := range []string{"a", "b"} {
		c := cfg
		c.InstanceID = name
		ins[i] = start(t, c)
	}
	return ins
}

// readyBefore counts the ready documents of kb whose ingestion committed
// before doc's.
func readyBefore(t testing.TB, cfg Config, kb, doc string) int {
	t.Helper()
	var n int
	kbID, err1 := service.ParseID(kb)
	docID, err2 := service.ParseID(doc)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatal(err)
	}
	err := connectDB(t, cfg.DatabaseURL).QueryRow(context.Background(), `SELECT count(*) FROM documents
		WHERE kb_id = $1 AND status = 'ready' AND updated_at < (SELECT updated_at FROM documents WHERE id = $2)`,
		int64(kbID), int64(docID)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// unsentIngest counts the ingest messages still in the outbox.
func unsentIngest(t testing.TB, cfg Config) int {
	t.Helper()
	var n int
	if err := connectDB(t, cfg.DatabaseURL).QueryRow(context.Background(),
		`SELECT count(*) FROM outbox WHERE topic = $1 AND sent_at IS NULL`, service.IngestTopic).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestIngestFairAcrossKnowledgeBases: a bulk import into knowledge base A
// through one instance, then a one-page upload into B through the other,
// on Redis Streams (TestIngestFairRocketMQ: on RocketMQ). The model server
// holds every document call until B's upload is in, so A's whole import
// waits when B arrives. B's document is ready before half of A's are: the
// relay keeps at most max(16, 2 × handlers) of A's documents in flight, so
// B's message is published at once, behind those few, not behind the whole
// import. Every document ends ready.
func TestIngestFairAcrossKnowledgeBases(t *testing.T) {
	fake := newFakeEmbedServer(t, 32)
	checkFair(t, fake, embedConfig(t, fake, 4), 30*time.Second, 80, 40)
}

// checkFair runs TestIngestFairAcrossKnowledgeBases's import of bulk
// documents and upload on cfg's MQ, and fails unless fewer than most of the
// import's documents are ready before the upload's. It waits up to wait
// for the first document call and for each document (a new RocketMQ push
// consumer needs a rebalance first).
func checkFair(t *testing.T, fake *fakeEmbedServer, cfg Config, wait time.Duration, bulk, most int) {
	ins := fairInstances(t, cfg)
	ca, cb := ins[0].adminClient(t), ins[1].adminClient(t)
	kbA, kbB := ca.createKB("bulk"), cb.createKB("small")

	fake.holdAfter(0)
	var docs []string
	for i := range bulk {
		docs = append(docs, ca.uploadAccepted(kbA, fmt.Sprintf("a%d.txt", i), fmt.Appendf(nil, "Manual %d: pallet%d rotation.", i, i)).ID)
	}
	testenv.Eventually(t, wait, "document calls held", func() bool { return fake.docInFlight.Load() >= 1 })
	small := cb.uploadAccepted(kbB, "b.txt", []byte("The VPN needs a token.")).ID
	fake.release()

	for _, d := range append([]string{small}, docs...) {
		if got := cb.waitDone(d, wait); got.Status != "ready" {
			t.Fatalf("document %s ended %s: %s", d, got.Status, got.Error)
		}
	}
	if n := readyBefore(t, cfg, kbA, small); n >= most {
		t.Fatalf("%d of the import's %d documents were ready before the small upload; want fewer than %d", n, bulk, most)
	} else {
		t.Logf("%d of %d import documents ready before the small upload", n, bulk)
	}
	if n := unsentIngest(t, cfg); n != 0 {
		t.Fatalf("%d ingest messages left in the outbox", n)
	}
}

// TestIngestBoundLosesNothing: imports into three knowledge bases by two
// uploaders with a bound of 2 in flight per knowledge base, and the
// instance that took the uploads stops while most of their messages are
// still held back in the outbox. The other instance publishes them:
// every document ends ready, nothing is left in the outbox.
func TestIngestBoundLosesNothing(t *testing.T) {
	const perKB = 12
	fake := newFakeEmbedServer(t, 32)
	cfg := embedConfig(t, fake, 4)
	cfg.ingestInFlightPerKB = 2
	ins := fairInstances(t, cfg)
	token := ins[0].login(t, "admin", "admin-password")
	admin := ins[0].client(t, token)
	ins[0].createUser(t, token, "carol", "carol-password", "admin")
	carol := ins[0].client(t, ins[0].login(t, "carol", "carol-password"))

	fake.holdAfter(0)
	var docs []string
	for k := range 3 {
		kb := admin.createKB(fmt.Sprintf("kb%d", k))
		for i := range perKB {
			c := admin
			if i%2 == 1 {
				c = carol
			}
			docs = append(docs, c.uploadAccepted(kb, fmt.Sprintf("d%d-%d.txt", k, i), fmt.Appendf(nil, "Note %d of %d: dock%d.", i, k, i)).ID)
		}
	}
	testenv.Eventually(t, 30*time.Second, "document calls held", func() bool { return fake.docInFlight.Load() >= 1 })
	if n := unsentIngest(t, cfg); n < 3*perKB-3*2 {
		t.Fatalf("%d ingest messages held back, want at least %d (the bound is 2 per knowledge base)", n, 3*perKB-3*2)
	}
	ins[0].stop()
	fake.release()
	c := ins[1].adminClient(t)
	for _, id := range docs {
		if d := c.waitDone(id, 60*time.Second); d.Status != "ready" {
			t.Fatalf("document %s ended %s: %s", id, d.Status, d.Error)
		}
	}
	if n := unsentIngest(t, cfg); n != 0 {
		t.Fatalf("%d ingest messages left in the outbox", n)
	}
}
