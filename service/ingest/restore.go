package ingest

import (
	"context"
	"errors"
	"fmt"

	"github.com/ragent-go/ragent/service"
)

// Restoring curated chunks (curate.go): a chunk's earlier revision, or a
// deleted chunk, comes back as a new revision.

// RestoreChunk brings a chunk back to the state it had at revision n (0:
// as parsed), as a new revision (editors). A deleted chunk comes back too
// (restoreDeleted).
func (s *Service) RestoreChunk(ctx context.Context, p service.Principal, id service.ID, n int) (*service.Chunk, error) {
	c, kbIDs, err := s.editableChunk(ctx, p, id)
	if errors.Is(err, service.ErrNotFound) {
		return s.restoreDeleted(ctx, p, id, n)
	}
	if err != nil {
		return nil, err
	}
	content, enabled, err := s.curation.ChunkRevisionState(ctx, id, kbIDs, n)
	if err != nil {
		return nil, service.Errorf(service.ErrNotFound, "chunk %s has no revision %d", id, n)
	}
	var edit *service.ChunkChange
	if content != c.Content {
		ch, err := s.embedOne(ctx, p, c.KnowledgeBaseID, id, content, c.Section, c.Revision+1)
		if err != nil {
			return nil, err
		}
		edit = &ch
	}
	return s.change(ctx, p, service.AuditChunkRestore, id, fmt.Sprintf(" to=%d", n), kbIDs, func(cur *service.Chunk) (service.ChunkChange, error) {
		ch := s.terms(cur.Content, cur.Section)
		ch.TokenCount = cur.TokenCount
		if content != cur.Content {
			if edit == nil || edit.Content != content {
				return ch, service.Errorf(service.ErrConflict, "chunk %s changed meanwhile: try again", id)
			}
			ch = *edit
		}
		ch.Enabled, ch.Action = enabled, service.ChunkRestore
		return ch, nil
	})
}

// restoreDeleted writes a deleted chunk back in the state it had at
// revision n, as the revision after its deletion: embedded again (its
// vector went with it), at its old place and section, indexed on both
// backends before the API answers, like an added chunk. Only a deletion of
// the document's current generation can be undone; after a reindex the
// file's chunks are the document's again (a conflict).
func (s *Service) restoreDeleted(ctx context.Context, p service.Principal, id service.ID, n int) (*service.Chunk, error) {
	readable, roles, err := s.editorKBs(ctx, p)
	if err != nil {
		return nil, err
	}
	revs, err := s.curation.ChunkRevisions(ctx, id, readable)
	if err != nil {
		return nil, err
	}
	if len(revs) == 0 {
		return nil, service.Errorf(service.ErrNotFound, "chunk %s not found", id)
	}
	del := revs[0]
	if r := roles[del.KnowledgeBaseID]; !r.AtLeast(service.KBEditor) {
		return nil, service.Errorf(service.ErrForbidden, "this needs the %s role on knowledge base %s (you are %s)", service.KBEditor, del.KnowledgeBaseID, r)
	}
	if del.Action != service.ChunkDelete {
		// Its last change left it in place: a reindex replaced it since.
		return nil, service.Errorf(service.ErrConflict, "chunk %s was replaced by a reindex of its document", id)
	}
	kbIDs := []service.ID{del.KnowledgeBaseID}
	content, enabled, err := s.curation.ChunkRevisionState(ctx, id, kbIDs, n)
	if err != nil || n >= del.Revision {
		return nil, service.Errorf(service.ErrNotFound, "chunk %s has no revision %d to restore (revision %d deleted it)", id, n, del.Revision)
	}
	ch, err := s.embedOne(ctx, p, del.KnowledgeBaseID, id, content, del.Section, del.Revision+1)
	if err != nil {
		return nil, err
	}
	ch.Action, ch.Enabled, ch.ActorUserID, ch.ActorName = service.ChunkRestore, enabled, p.UserID, p.Username
	if ch.RevisionID, err = s.ids.NextID(); err != nil {
		return nil, err
	}
	ev := service.AuditEvent{Action: service.AuditChunkRestore, TargetType: service.TargetChunk, TargetID: id.String()}
	mirrored := false
	out, err := service.AuditDo(ctx, s.audit, ev, func(ctx context.Context, ev *service.AuditEvent) (*service.Chunk, error) {
		c, rev, err := s.curation.RestoreDeleted(ctx, del, service.Chunk{Content: content, Enabled: enabled}, ch,
			func(c *service.Chunk) error {
				if !c.Enabled {
					return nil // restored disabled: out of every index, as it was
				}
				mirrored = true
				return s.mirror(ctx, c, ch)
			})
		if err == nil {
			ev.Detail = fmt.Sprintf("kb=%s document=%s revision=%d restore to=%d (deleted at revision %d) ordinal=%d",
				rev.KnowledgeBaseID, rev.DocumentID, rev.Revision, n, del.Revision, c.Ordinal)
		}
		return c, err
	})
	if err != nil && mirrored && s.search != nil {
		if derr := s.search.index.DeleteChunks(context.WithoutCancel(ctx), []service.ID{id}); derr != nil {
			s.log.WarnContext(ctx, "could not remove an uncommitted restore from the search engine; ragent reindex-search repairs it", "chunk", id, "err", derr)
		}
	}
	return out, err
}

// DeletedChunks lists the deletions of a document's current chunks that
// can be restored, newest first: the deleting revisions, with the text
// and place the chunk had (editors: the text is no longer in the
// document).
func (s *Service) DeletedChunks(ctx context.Context, p service.Principal, docID service.ID) ([]service.ChunkRevision, error) {
	if s.curation == nil {
		return nil, service.Errorf(service.ErrUnavailable, "chunk curation is not enabled")
	}
	doc, err := s.document(ctx, p, docID, service.KBEditor)
	if err != nil {
		return nil, err
	}
	return s.curation.DeletedChunks(ctx, doc.ID, []service.ID{doc.KnowledgeBaseID})
}
