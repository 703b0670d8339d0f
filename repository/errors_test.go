package repository

import (
	"errors"
	"testing"

	"github.com/ragent-go/ragent/internal/testdocs"
	"github.com/ragent-go/ragent/service"
)

// Postgres refusing the data itself (a term too big for the btree index, a
// NUL byte in text) is a permanent, invalid-input failure: retrying the same
// chunks fails the same way, so ingestion must not retry it.
func TestDataErrorsArePermanent(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	cases := []struct {
		name  string
		chunk service.Chunk
		code  string
	}{
		{"term over the btree row limit", chunk(0, "long word", unit(4, 0), "ok", testdocs.LongWord(40_000)), "54000"},
		{"NUL byte in content", chunk(0, "nul \x00 byte", unit(4, 0), "nul"), "22021"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := seedDoc(t, s, kb, tc.name)
			err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), []service.Chunk{tc.chunk})
			if !errors.Is(err, service.ErrPermanent) || !errors.Is(err, service.ErrInvalid) {
				t.Fatalf("ReplaceChunks: %v, want a permanent invalid-data error", err)
			}
			if got, err := s.Document(ctx, d.ID); err != nil || got.Status == service.DocumentReady {
				t.Fatalf("document after the failed replace: %+v, %v", got, err)
			}
			t.Logf("%s: %v", tc.code, err)
		})
	}
	t.Run("a conflict is not permanent", func(t *testing.T) {
		d := seedDoc(t, s, kb, "conflict")
		c := chunk(0, "a", unit(4, 0), "a")
		err := s.ReplaceChunks(ctx, d.ID, 1, docSpace(t, s, d.ID), []service.Chunk{c, c})
		if err == nil || errors.Is(err, service.ErrPermanent) {
			t.Fatalf("duplicate chunk id: %v, want a non-permanent error", err)
		}
	})
}
