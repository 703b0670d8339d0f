package ingest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// docStore holds documents by id and records every call a read makes.
type docStore struct {
	Store // the methods a read does not call panic through the nil interface
	docs  map[service.ID]*service.Document
	calls []string
}

func (s *docStore) Document(_ context.Context, id service.ID) (*service.Document, error) {
	s.calls = append(s.calls, "Document")
	if d, ok := s.docs[id]; ok {
		return d, nil
	}
	return nil, service.ErrNotFound
}

func (s *docStore) DocumentIn(_ context.Context, id service.ID, kbIDs []service.ID) (*service.Document, error) {
	s.calls = append(s.calls, fmt.Sprintf("DocumentIn %v", kbIDs))
	if d, ok := s.docs[id]; ok && slices.Contains(kbIDs, d.KnowledgeBaseID) {
		return d, nil
	}
	return nil, service.ErrNotFound
}

func (s *docStore) DocumentChunks(context.Context, service.ID, int, int) ([]service.Chunk, error) {
	s.calls = append(s.calls, "DocumentChunks")
	return nil, nil
}

// grants: user 7 views knowledge base 1; knowledge base 2 is private.
type grants struct{ calls *[]string }

func (g grants) KnowledgeBaseGrants(_ context.Context, _ service.ID, kbIDs []service.ID) ([]service.KBGrant, error) {
	*g.calls = append(*g.calls, fmt.Sprintf("grants %v", kbIDs))
	return []service.KBGrant{
		{KnowledgeBaseID: 1, Visibility: service.VisibilityPrivate, Role: service.KBViewer},
		{KnowledgeBaseID: 2, Visibility: service.VisibilityPrivate},
	}, nil
}

// TestDocumentReadAccessFirst: a document of a knowledge base the caller
// cannot read and an id that does not exist get the same 404 after the same
// store calls, so neither the answer nor its work tells them apart; a
// readable one the caller may not change is 403.
func TestDocumentReadAccessFirst(t *testing.T) {
	store := &docStore{docs: map[service.ID]*service.Document{
		10: {ID: 10, KnowledgeBaseID: 1}, 20: {ID: 20, KnowledgeBaseID: 2},
	}}
	svc := New(store, service.NewAccess(grants{&store.calls}), fakeEmbedder{}, &counterIDs{}, nil, Config{})
	viewer := service.Principal{UserID: 7, Role: service.RoleUser}
	ctx := context.Background()

	read := func(id service.ID) (string, []string) {
		t.Helper()
		store.calls = nil
		_, err := svc.Chunks(ctx, viewer, id, 0, 10)
		if !errors.Is(err, service.ErrNotFound) {
			t.Fatalf("document %d: %v, want not found", id, err)
		}
		return fmt.Sprintf("%v", err), store.calls
	}
	privateErr, privateCalls := read(20)
	missingErr, missingCalls := read(30)
	if missingErr != "document 30 not found" || privateErr != "document 20 not found" {
		t.Fatalf("errors %q and %q", privateErr, missingErr)
	}
	if !slices.Equal(privateCalls, missingCalls) || slices.Contains(privateCalls, "Document") {
		t.Fatalf("an unreadable document costs %v, a missing id %v: want the same, without Document", privateCalls, missingCalls)
	}

	store.calls = nil
	if _, err := svc.Chunks(ctx, viewer, 10, 0, 10); err != nil || !slices.Equal(store.calls, []string{"grants []", "DocumentIn [1]", "DocumentChunks"}) {
		t.Fatalf("readable document: %v after %v", err, store.calls)
	}
	if _, err := svc.document(ctx, viewer, 10, service.KBEditor); !errors.Is(err, service.ErrForbidden) {
		t.Fatalf("viewer changing a document: %v, want forbidden", err)
	}
}
