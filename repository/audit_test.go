package repository

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// InTx joins every store call made with its context, nested WithinTx
// transactions included (as savepoints), and rolls them back together.
func TestInTxJoinsStoreCalls(t *testing.T) {
	s, ctx := migrated(t)
	boom := errors.New("boom")
	var kbID service.ID
	err := s.InTx(ctx, func(ctx context.Context) error {
		kb := &service.KnowledgeBase{ID: newID(), Name: "rolled back", EmbeddingModel: "m", EmbeddingDim: 4,
			ChunkSize: 512, ChunkOverlap: 64, VectorWeight: 1}
		kbID = kb.ID
		if err := s.CreateKnowledgeBase(ctx, kb); err != nil {
			return err
		}
		// DeleteKnowledgeBase runs its own WithinTx: inside InTx it is a
		// savepoint that sees the row created above, uncommitted.
		if err := s.DeleteKnowledgeBase(ctx, kb.ID); err != nil {
			return err
		}
		if err := s.AppendAudit(ctx, &service.AuditEvent{ID: newID(), At: time.Now(), Action: service.AuditKBCreate, Result: service.AuditSuccess}); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("InTx: %v", err)
	}
	if _, err := s.KnowledgeBase(ctx, kbID); !errors.Is(err, service.ErrNotFound) {
		t.Fatalf("the knowledge base outlived the rollback: %v", err)
	}
	if got, err := s.AuditEvents(ctx, service.AuditFilter{Limit: 10}); err != nil || len(got) != 0 {
		t.Fatalf("events after the rollback: %v %+v", err, got)
	}
}

func TestAuditEventsFilters(t *testing.T) {
	s, ctx := migrated(t)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	events := []*service.AuditEvent{
		{ActorUserID: 7, ActorName: "ann", Action: service.AuditKBCreate, TargetID: "100", Result: service.AuditSuccess},
		{ActorUserID: 7, ActorName: "ann", Action: service.AuditKBDelete, TargetID: "100", Result: service.AuditNotFound},
		{ActorKeyID: 9, Action: service.AuditKBDelete, TargetID: "101", Result: service.AuditSuccess},
		{Action: service.AuditLogin, TargetID: "bob", Result: service.AuditDenied},
	}
	for i, e := range events {
		e.ID, e.At = service.ID(500+i), base.Add(time.Duration(i)*time.Minute)
		if err := s.AppendAudit(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	ids := func(f service.AuditFilter) []service.ID {
		t.Helper()
		f.Limit = 10
		got, err := s.AuditEvents(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		var out []service.ID
		for _, e := range got {
			out = append(out, e.ID)
		}
		return out
	}
	for _, tt := range []struct {
		name string
		f    service.AuditFilter
		want []service.ID
	}{
		{"all, newest first", service.AuditFilter{}, []service.ID{503, 502, 501, 500}},
		{"actor", service.AuditFilter{ActorUserID: 7}, []service.ID{501, 500}},
		{"action", service.AuditFilter{Action: service.AuditKBDelete}, []service.ID{502, 501}},
		{"target", service.AuditFilter{TargetID: "100"}, []service.ID{501, 500}},
		{"result", service.AuditFilter{Result: service.AuditDenied}, []service.ID{503}},
		{"since and until", service.AuditFilter{Since: base.Add(time.Minute), Until: base.Add(3 * time.Minute)}, []service.ID{502, 501}},
		{"cursor", service.AuditFilter{Before: 502}, []service.ID{501, 500}},
	} {
		if got := ids(tt.f); !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
	got, err := s.AuditEvents(ctx, service.AuditFilter{Action: service.AuditKBDelete, Result: service.AuditSuccess, Limit: 1})
	if err != nil || len(got) != 1 || got[0].ActorKeyID != 9 || got[0].ActorUserID != 0 {
		t.Fatalf("key actor: %v %+v", err, got)
	}
}
