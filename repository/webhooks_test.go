package repository

import (
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Failed and skipped deliveries are kept for their own retention, sent
// ones for the outbox's; pending ones are never pruned.
func TestPruneDeliveries(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	w := &service.Webhook{ID: newID(), KnowledgeBaseID: kb.ID, URL: "https://example.com/hook"}
	if err := s.CreateWebhook(ctx, w, []byte("sealed"), 0); err != nil {
		t.Fatal(err)
	}
	for _, status := range []string{"pending", "sent", "failed", "failed", "skipped"} {
		if err := s.db.Exec(`INSERT INTO webhook_deliveries (webhook_id, event, payload, status, sent_at, created_at)
			VALUES (?, 'document.ready', '{}', ?, CASE WHEN ? = 'sent' THEN now() END, now() - interval '2 days')`,
			int64(w.ID), status, status).Error; err != nil {
			t.Fatal(err)
		}
	}
	left := func() map[string]int {
		t.Helper()
		var rows []struct {
			Status string
			N      int
		}
		if err := s.db.Raw(`SELECT status, count(*) AS n FROM webhook_deliveries GROUP BY status`).Scan(&rows).Error; err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, r := range rows {
			out[r.Status] = r.N
		}
		return out
	}
	now := time.Now()
	// Done rows made after the cutoff stay; the sent one is old enough for
	// its cutoff.
	if n, err := s.PruneDeliveries(ctx, now.Add(time.Hour), now.Add(-3*24*time.Hour), 10); err != nil || n != 1 {
		t.Fatalf("prune sent: %d, %v; want 1", n, err)
	}
	if got := left(); got["sent"] != 0 || got["failed"] != 2 || got["skipped"] != 1 || got["pending"] != 1 {
		t.Fatalf("after pruning sent rows: %v", got)
	}
	if n, err := s.PruneDeliveries(ctx, now, now.Add(-24*time.Hour), 10); err != nil || n != 3 {
		t.Fatalf("prune done: %d, %v; want 3", n, err)
	}
	if got := left(); len(got) != 1 || got["pending"] != 1 {
		t.Fatalf("after pruning done rows: %v", got)
	}
}

// A claim takes at most one delivery of a webhook at a time, and none of a
// webhook with one in flight.
func TestClaimDeliveriesOnePerWebhook(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	for range 2 {
		w := &service.Webhook{ID: newID(), KnowledgeBaseID: kb.ID, URL: "https://example.com/hook"}
		if err := s.CreateWebhook(ctx, w, []byte("sealed"), 0); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if err := s.db.Exec(`INSERT INTO webhook_deliveries (webhook_id, event, payload) VALUES (?, 'document.ready', '{}')`,
				int64(w.ID)).Error; err != nil {
				t.Fatal(err)
			}
		}
	}
	first, err := s.ClaimDeliveries(ctx, time.Minute, 10)
	if err != nil || len(first) != 2 || first[0].WebhookID == first[1].WebhookID {
		t.Fatalf("first claim: %+v %v; want one of each webhook", first, err)
	}
	if again, err := s.ClaimDeliveries(ctx, time.Minute, 10); err != nil || len(again) != 0 {
		t.Fatalf("claim with both in flight: %+v %v; want none", again, err)
	}
	if err := s.FinishDelivery(ctx, first[0].ID, "", 0); err != nil {
		t.Fatal(err)
	}
	next, err := s.ClaimDeliveries(ctx, time.Minute, 10)
	if err != nil || len(next) != 1 || next[0].WebhookID != first[0].WebhookID || next[0].ID <= first[0].ID {
		t.Fatalf("claim after one finished: %+v %v; want the next of webhook %s", next, err, first[0].WebhookID)
	}
}
