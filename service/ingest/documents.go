package ingest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/ragent-go/ragent/service"
)

// document returns a document when p holds at least need on its knowledge
// base. A document p cannot read is reported as not found, like one that
// does not exist.
func (s *Service) document(ctx context.Context, p service.Principal, id service.ID, need service.KBRole) (*service.Document, error) {
	// Read access first, then the document among what p reads: a document
	// of a knowledge base p cannot read costs the same two queries and
	// answers the same 404 as an id that does not exist, so neither the
	// answer nor its timing tells them apart.
	roles, err := s.access.Roles(ctx, p, nil)
	if err != nil {
		return nil, err
	}
	doc, err := s.store.DocumentIn(ctx, id, slices.Collect(maps.Keys(roles)))
	if errors.Is(err, service.ErrNotFound) {
		return nil, service.Errorf(service.ErrNotFound, "document %s not found", id)
	}
	if err != nil {
		return nil, err
	}
	if r := roles[doc.KnowledgeBaseID]; !r.AtLeast(need) {
		return nil, service.Errorf(service.ErrForbidden, "this needs the %s role on knowledge base %s (you are %s)", need, doc.KnowledgeBaseID, r)
	}
	return doc, nil
}

// Document returns one document (viewers of its knowledge base).
func (s *Service) Document(ctx context.Context, p service.Principal, id service.ID) (*service.Document, error) {
	return s.document(ctx, p, id, service.KBViewer)
}

// Documents lists a knowledge base's documents, newest first (viewers).
func (s *Service) Documents(ctx context.Context, p service.Principal, kbID, before service.ID, limit int) ([]*service.Document, error) {
	if _, err := s.access.Require(ctx, p, kbID, service.KBViewer); err != nil {
		return nil, err
	}
	return s.store.Documents(ctx, kbID, before, limit)
}

// Chunks returns a document's chunks in order, for preview (viewers).
func (s *Service) Chunks(ctx context.Context, p service.Principal, docID service.ID, afterOrdinal, limit int) ([]service.Chunk, error) {
	if _, err := s.document(ctx, p, docID, service.KBViewer); err != nil {
		return nil, err
	}
	return s.store.DocumentChunks(ctx, docID, afterOrdinal, limit)
}

// Chunk returns one chunk (viewers of its knowledge base). Like document, a
// chunk of a knowledge base p cannot read is not found, for the same cost.
func (s *Service) Chunk(ctx context.Context, p service.Principal, id service.ID) (*service.Chunk, error) {
	readable, err := s.access.Readable(ctx, p)
	if err != nil {
		return nil, err
	}
	c, err := s.store.ChunkIn(ctx, id, readable)
	if errors.Is(err, service.ErrNotFound) {
		return nil, service.Errorf(service.ErrNotFound, "chunk %s not found", id)
	}
	return c, err
}

// Delete removes a document from search at once (editors).
func (s *Service) Delete(ctx context.Context, p service.Principal, id service.ID) error {
	ev := service.AuditEvent{Action: service.AuditDocumentDelete, TargetType: service.TargetDocument, TargetID: id.String()}
	return s.audit.Do(ctx, ev, func(ctx context.Context, ev *service.AuditEvent) error {
		doc, err := s.document(ctx, p, id, service.KBEditor)
		if err != nil {
			return err
		}
		ev.Detail = fmt.Sprintf("kb=%s name=%s", doc.KnowledgeBaseID, doc.Name)
		return s.store.DeleteDocument(ctx, id)
	})
}

// Reindex builds a new generation of a document's chunks; the current ones
// stay searchable until the new ones replace them in one transaction
// (editors).
func (s *Service) Reindex(ctx context.Context, p service.Principal, id service.ID) (*service.Document, error) {
	ev := service.AuditEvent{Action: service.AuditDocumentReindex, TargetType: service.TargetDocument, TargetID: id.String()}
	doc, err := service.AuditDo(ctx, s.audit, ev, func(ctx context.Context, ev *service.AuditEvent) (*service.Document, error) {
		doc, err := s.reindex(ctx, p, id)
		if err == nil {
			ev.Detail = fmt.Sprintf("kb=%s name=%s generation=%d", doc.KnowledgeBaseID, doc.Name, doc.Generation)
		}
		return doc, err
	})
	if err != nil {
		return nil, err
	}
	s.wakeRelay()
	return doc, nil
}

func (s *Service) reindex(ctx context.Context, p service.Principal, id service.ID) (*service.Document, error) {
	doc, err := s.document(ctx, p, id, service.KBEditor)
	if err != nil {
		return nil, err
	}
	if doc.Kind == service.DocumentManual {
		return nil, service.Errorf(service.ErrInvalid, "document %s holds the knowledge base's manual chunks: it has no file to reindex", id)
	}
	if doc.SHA256 == "" {
		return nil, service.Errorf(service.ErrInvalid, "document %s has no content yet: its URL has not been fetched", id)
	}
	var msgErr error
	doc, err = s.store.Reindex(ctx, id, func(d *service.Document) service.OutboxMessage {
		m, err := s.tracedIngestMessage(ctx, d.ID, d.Generation)
		msgErr = err
		return m
	})
	if err == nil {
		err = msgErr
	}
	return doc, err
}
