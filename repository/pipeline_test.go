package repository

import (
	"context"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// Migration 0008 upgrades a database with documents: they keep their
// content and status, have no external id, and an external id can be
// given to new ones.
func TestPipelinesMigrationKeepsDocuments(t *testing.T) {
	s := upgraded(t, "0008",
		`INSERT INTO knowledge_bases (id, name, embedding_model, embedding_dim) VALUES (1, 'old', 'm', 512)`,
		`INSERT INTO document_blobs (sha256, bytes, size) VALUES ('abc', 'old bytes', 9)`,
		`INSERT INTO documents (id, kb_id, name, mime, size, sha256, status, chunk_count) VALUES (10, 1, 'old.txt', 'text/plain', 9, 'abc', 'ready', 1)`)
	ctx := context.Background()
	old, err := s.Document(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	if old.SHA256 != "abc" || old.Status != service.DocumentReady || old.ExternalID != "" || old.Source != nil {
		t.Fatalf("old document after the upgrade: %+v", old)
	}
	noQueue := func(*service.Document) (service.OutboxMessage, error) {
		return service.OutboxMessage{ID: 99, Topic: "t", Key: "k", Payload: []byte("{}")}, nil
	}
	d := &service.Document{ID: 11, KnowledgeBaseID: 1, Name: "new.txt", Mime: "text/plain", Size: 3, SHA256: "def", ExternalID: "e-1"}
	if _, changed, err := s.PutVersion(ctx, d, []byte("new"), noQueue); err != nil || !changed {
		t.Fatalf("put: %v %v", changed, err)
	}
	got, err := s.FindDocuments(ctx, 1, service.DocumentQuery{ExternalID: "e-1", Limit: 10})
	if err != nil || len(got) != 1 || got[0].ID != 11 {
		t.Fatalf("lookup by external id: %+v %v", got, err)
	}
	// The same content under another external id is still one document.
	dup := &service.Document{ID: 12, KnowledgeBaseID: 1, Name: "dup.txt", Mime: "text/plain", Size: 9, SHA256: "abc", ExternalID: "e-2"}
	if _, _, err := s.PutVersion(ctx, dup, []byte("old bytes"), noQueue); err == nil || !strings.Contains(err.Error(), "already") {
		t.Fatalf("duplicate content: %v", err)
	}
}
