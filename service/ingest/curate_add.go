package ingest

import (
	"context"
	"fmt"
	"strings"

	"github.com/ragent-go/ragent/service"
)

// Chunks written into a document's live generation rather than changed in
// place: one written by hand (AddChunk, AddManualChunk) and a deleted one
// restored (restoreDeleted). Both are embedded first, then stored, counted
// and indexed in one transaction under an audit event (writeBack).

// NewChunk is a chunk written by hand: its content, or a question and its
// answer (written as "Q: …\nA: …", so either side is found by keyword).
type NewChunk struct {
	Content  string `json:"content"`
	Question string `json:"question"`
	Answer   string `json:"answer"`
}

func (n NewChunk) text() (string, error) {
	q, a := strings.TrimSpace(n.Question), strings.TrimSpace(n.Answer)
	switch {
	case n.Content != "" && (q != "" || a != ""):
		return "", service.Errorf(service.ErrInvalid, "give either content or a question and its answer, not both")
	case n.Content != "":
		return service.CheckChunkContent(n.Content)
	case q == "" || a == "":
		return "", service.Errorf(service.ErrInvalid, "a manual chunk needs content, or both a question and an answer")
	}
	return service.CheckChunkContent("Q: " + q + "\nA: " + a)
}

// AddChunk adds a chunk written by hand to a document (editors). It is
// discarded with the document's other chunks by a reindex of its file:
// AddManualChunk keeps one for good.
func (s *Service) AddChunk(ctx context.Context, p service.Principal, docID service.ID, in NewChunk) (*service.Chunk, error) {
	doc, err := s.document(ctx, p, docID, service.KBEditor)
	if err != nil {
		return nil, err
	}
	return s.addChunk(ctx, p, doc, in)
}

// AddManualChunk adds a chunk written by hand to the knowledge base's
// manual document, made with its first chunk (editors).
func (s *Service) AddManualChunk(ctx context.Context, p service.Principal, kbID service.ID, in NewChunk) (*service.Chunk, error) {
	if _, err := s.access.Require(ctx, p, kbID, service.KBEditor); err != nil {
		return nil, err
	}
	if s.curation == nil {
		return nil, service.Errorf(service.ErrUnavailable, "chunk curation is not enabled")
	}
	if _, err := in.text(); err != nil {
		return nil, err
	}
	id, err := s.ids.NextID()
	if err != nil {
		return nil, err
	}
	doc, err := s.curation.ManualDocument(ctx, kbID, id, p.UserID)
	if err != nil {
		return nil, err
	}
	return s.addChunk(ctx, p, doc, in)
}

func (s *Service) addChunk(ctx context.Context, p service.Principal, doc *service.Document, in NewChunk) (*service.Chunk, error) {
	if s.curation == nil {
		return nil, service.Errorf(service.ErrUnavailable, "chunk curation is not enabled")
	}
	content, err := in.text()
	if err != nil {
		return nil, err
	}
	id, err := s.ids.NextID()
	if err != nil {
		return nil, err
	}
	ch, err := s.revision(ctx, p, doc.KnowledgeBaseID, id, content, "", 1, service.ChunkCreate, true)
	if err != nil {
		return nil, err
	}
	ev := service.AuditEvent{Action: service.AuditChunkCreate, TargetType: service.TargetChunk, TargetID: id.String()}
	return s.writeBack(ctx, ev, id, ch, "chunk", func(ctx context.Context, mirror func(*service.Chunk) error) (*service.Chunk, string, error) {
		c, _, err := s.curation.AddChunk(ctx, doc.ID, []service.ID{doc.KnowledgeBaseID}, service.Chunk{ID: id}, ch, mirror)
		if err != nil {
			return nil, "", err
		}
		return c, fmt.Sprintf("kb=%s document=%s ordinal=%d", c.KnowledgeBaseID, c.DocumentID, c.Ordinal), nil
	})
}

// restoreDeleted writes a deleted chunk back in the state it had at
// revision n, as the revision after its deletion: embedded again (its
// vector went with it), at its old place and section, indexed on both
// backends before the API answers, like an added chunk. Only a deletion of
// the document's current generation can be undone; after a reindex the
// file's chunks are the document's again (a conflict).
func (s *Service) restoreDeleted(ctx context.Context, p service.Principal, id service.ID, n int) (*service.Chunk, error) {
	revs, _, roles, err := s.editorRevisions(ctx, p, id)
	if err != nil {
		return nil, err
	}
	if len(revs) == 0 {
		return nil, service.Errorf(service.ErrNotFound, "chunk %s not found", id)
	}
	del := revs[0]
	if err := mayEdit(roles, del.KnowledgeBaseID); err != nil {
		return nil, err
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
	ch, err := s.revision(ctx, p, del.KnowledgeBaseID, id, content, del.Section, del.Revision+1, service.ChunkRestore, enabled)
	if err != nil {
		return nil, err
	}
	ev := service.AuditEvent{Action: service.AuditChunkRestore, TargetType: service.TargetChunk, TargetID: id.String()}
	return s.writeBack(ctx, ev, id, ch, "restore", func(ctx context.Context, mirror func(*service.Chunk) error) (*service.Chunk, string, error) {
		c, rev, err := s.curation.RestoreDeleted(ctx, del, service.Chunk{Content: content, Enabled: enabled}, ch,
			func(c *service.Chunk) error {
				if !c.Enabled {
					return nil // restored disabled: out of every index, as it was
				}
				return mirror(c)
			})
		if err != nil {
			return nil, "", err
		}
		return c, fmt.Sprintf("kb=%s document=%s revision=%d restore to=%d (deleted at revision %d) ordinal=%d",
			rev.KnowledgeBaseID, rev.DocumentID, rev.Revision, n, del.Revision, c.Ordinal), nil
	})
}

// revision embeds content as revision number rev of chunk id, an action
// of p's leaving the chunk enabled or not.
func (s *Service) revision(ctx context.Context, p service.Principal, kbID, id service.ID, content, section string, rev int,
	action service.ChunkAction, enabled bool) (service.ChunkChange, error) {
	ch, err := s.embedOne(ctx, p, kbID, id, content, section, rev)
	if err != nil {
		return ch, err
	}
	ch.Action, ch.Enabled, ch.ActorUserID, ch.ActorName = action, enabled, p.UserID, p.Username
	ch.RevisionID, err = s.ids.NextID()
	return ch, err
}

// writeBack runs put, which stores chunk id with its revision ch and
// returns it with the audit detail, under the audit event ev; put hands
// the chunk to mirror to index it on the search engine inside its
// transaction. When the transaction fails after that, the engine's copy is
// taken out again (what names the chunk in the warning if that fails too).
func (s *Service) writeBack(ctx context.Context, ev service.AuditEvent, id service.ID, ch service.ChunkChange, what string,
	put func(ctx context.Context, mirror func(*service.Chunk) error) (*service.Chunk, string, error)) (*service.Chunk, error) {
	mirrored := false
	out, err := service.AuditDo(ctx, s.audit, ev, func(ctx context.Context, ev *service.AuditEvent) (*service.Chunk, error) {
		c, detail, err := put(ctx, func(c *service.Chunk) error {
			mirrored = true
			return s.mirror(ctx, c, ch)
		})
		ev.Detail = detail
		return c, err
	})
	if err != nil && mirrored && s.search != nil {
		if derr := s.search.index.DeleteChunks(context.WithoutCancel(ctx), []service.ID{id}); derr != nil {
			s.log.WarnContext(ctx, "could not remove an uncommitted "+what+" from the search engine; ragent reindex-search repairs it", "chunk", id, "err", derr)
		}
	}
	return out, err
}
