package repository

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// relayKeys runs RelayIngest with a bound of perKB and returns the keys it
// published, in order.
func relayKeys(t *testing.T, s *Store, perKB int) []string {
	t.Helper()
	var keys []string
	_, _, err := s.RelayIngest(t.Context(), perKB, 100, func(_ context.Context, m service.OutboxMessage) (string, error) {
		keys = append(keys, m.Key)
		return "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func key(d *service.Document) string { return d.ID.String() + ":1" }

// seedQueued is seedDoc by uploader with its ingest message's id given, so
// the test knows which of a lane's rows is oldest.
func seedQueued(t *testing.T, s *Store, kb *service.KnowledgeBase, uploader service.ID, content string, msgID service.ID) *service.Document {
	t.Helper()
	d := &service.Document{ID: newID(), KnowledgeBaseID: kb.ID, Name: "doc.txt", Mime: "text/plain", CreatedBy: uploader,
		Size: int64(len(content)), SHA256: fmt.Sprintf("%064x", newID())}
	msg := service.OutboxMessage{ID: msgID, Topic: service.IngestTopic, Key: key(d), Payload: []byte("{}")}
	if err := s.CreateUpload(t.Context(), d, []byte(content), msg); err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRelayIngestTurns: a knowledge base gets at most the bound of its
// documents in flight, its uploaders interleaved; another knowledge base's
// document goes out beside them; a finished document makes room for the
// next; re-queued and re-published documents already in flight go out at
// once, beyond the bound; other messages do not wait.
func TestRelayIngestTurns(t *testing.T) {
	s, ctx := migrated(t)
	kbA, kbB := seedKB(t, s, 4), seedKB(t, s, 4)
	var a []*service.Document
	// a0, a1, a2, a3 are one uploader's (7), a4 and a5 another's (8).
	for i, c := range []string{"a0", "a1", "a2", "a3", "a4", "a5"} {
		a = append(a, seedQueued(t, s, kbA, service.ID(7+i/4), c, service.ID(100+i)))
	}
	b := seedQueued(t, s, kbB, 7, "b0", 200)

	got := relayKeys(t, s, 3)
	// First places first (a0 and a4 of A, b0 of B), then A's third.
	want := map[string]bool{key(a[0]): true, key(a[4]): true, key(b): true, key(a[1]): true}
	if len(got) != 4 || !want[got[0]] || !want[got[1]] || !want[got[2]] || got[3] != key(a[1]) {
		t.Fatalf("first round published %v, want a0, a4, b0 in some order and then a1", got)
	}
	if got := relayKeys(t, s, 3); len(got) != 0 {
		t.Fatalf("with A at its bound the relay published %v", got)
	}
	// a4 finishes: A has room for one, and uploader 8 has none in flight
	// against 7's two: a5 goes, not 7's older a2.
	if err := s.db.Exec("UPDATE documents SET status = 'ready' WHERE id = ?", int64(a[4].ID)).Error; err != nil {
		t.Fatal(err)
	}
	if got := relayKeys(t, s, 3); len(got) != 1 || got[0] != key(a[5]) {
		t.Fatalf("after a4 finished the relay published %v, want a5", got)
	}

	// a0 is stuck running and re-queued; a1 pending too long is re-published:
	// both are in flight already and go out at once.
	if _, err := s.ClaimDocument(ctx, a[0].ID, 1); err != nil {
		t.Fatal(err)
	}
	stuck, _ := s.Document(ctx, a[0].ID)
	if ok, err := s.Requeue(ctx, stuck, service.OutboxMessage{ID: newID(), Topic: service.IngestTopic, Key: key(a[0]), Payload: []byte("{}")}); err != nil || !ok {
		t.Fatalf("requeue: %v %v", ok, err)
	}
	if err := s.db.Exec("UPDATE documents SET updated_at = now() - interval '1 hour' WHERE id = ?", int64(a[1].ID)).Error; err != nil {
		t.Fatal(err)
	}
	n, err := s.RepublishPending(ctx, time.Now().Add(-time.Minute), 10, func(d *service.Document) (service.OutboxMessage, error) {
		return service.OutboxMessage{ID: newID(), Topic: service.IngestTopic, Key: key(d), Payload: []byte("{}")}, nil
	})
	if err != nil || n != 1 {
		t.Fatalf("republish: %d %v, want a1's", n, err)
	}
	if err := s.enqueue(service.OutboxMessage{ID: newID(), Topic: service.SearchIndexTopic, Key: "x", Payload: []byte("{}")}); err != nil {
		t.Fatal(err)
	}
	var free []string
	if _, _, err := s.RelayOutbox(ctx, 10, func(_ context.Context, m service.OutboxMessage) (string, error) {
		free = append(free, m.Key)
		return "", nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(free) != 3 {
		t.Fatalf("rows that go out at once: %v, want a0's re-queue, a1's re-publication and the search-index message", free)
	}
	if got := relayKeys(t, s, 3); len(got) != 0 {
		t.Fatalf("A still at its bound, yet the relay published %v", got)
	}
	// With the bound raised the rest goes: a2, a3, held back for an hour,
	// and not re-published by the reaper just after.
	if err := s.db.Exec("UPDATE documents SET updated_at = now() - interval '1 hour' WHERE id IN (?, ?)",
		int64(a[2].ID), int64(a[3].ID)).Error; err != nil {
		t.Fatal(err)
	}
	if got := relayKeys(t, s, 100); len(got) != 2 {
		t.Fatalf("with room the relay published %v, want a2 and a3", got)
	}
	if n, err := s.RepublishPending(ctx, time.Now().Add(-time.Minute), 10, func(d *service.Document) (service.OutboxMessage, error) {
		return service.OutboxMessage{ID: newID(), Topic: service.IngestTopic, Key: key(d), Payload: []byte("{}")}, nil
	}); err != nil || n != 0 {
		t.Fatalf("the reaper re-published %d documents just published (%v)", n, err)
	}
}
