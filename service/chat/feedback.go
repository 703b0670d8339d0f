package chat

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/ragent-go/ragent/service"
)

// FeedbackStore keeps answer feedback (repository.Store).
type FeedbackStore interface {
	Message(ctx context.Context, id service.ID) (*service.Message, error)
	PutFeedback(ctx context.Context, f *service.Feedback) error
	Feedbacks(ctx context.Context, f service.FeedbackFilter) ([]service.Feedback, error)
	JudgeFeedback(ctx context.Context, id service.ID, chunkIDs []service.ID) (*service.Feedback, error)
	EvalChunks(ctx context.Context, chunkIDs []service.ID) ([]service.EvalDocument, error)
}

// FeedbackInput is POST /messages/{id}/feedback.
type FeedbackInput struct {
	Rating  service.Rating `json:"rating"`
	Comment string         `json:"comment"`
}

// JudgeInput is the chunks an admin marks as the right ones for a question.
type JudgeInput struct {
	ChunkIDs []service.ID `json:"chunkIds"`
}

func (s *Service) feedbackStore() (FeedbackStore, error) {
	if s.d.Feedback == nil {
		return nil, service.Errorf(service.ErrUnavailable, "answer feedback is not enabled")
	}
	return s.d.Feedback, nil
}

// Rate records p's rating of an answer, replacing p's earlier one. p must
// see the answer's conversation (its owner, an admin, an API key whose
// knowledge bases its turns stayed within); any other message is not
// found, as one that does not exist.
func (s *Service) Rate(ctx context.Context, p service.Principal, messageID service.ID, in FeedbackInput) (*service.Feedback, error) {
	store, err := s.feedbackStore()
	if err != nil {
		return nil, err
	}
	if !in.Rating.Valid() {
		return nil, service.Errorf(service.ErrInvalid, `rating must be "up" or "down"`)
	}
	comment, err := service.CheckComment(in.Comment)
	if err != nil {
		return nil, err
	}
	notFound := service.Errorf(service.ErrNotFound, "message %s not found", messageID)
	m, err := store.Message(ctx, messageID)
	if errors.Is(err, service.ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, err
	}
	if _, err := s.ownConversation(ctx, p, m.ConversationID, true); err != nil {
		if errors.Is(err, service.ErrNotFound) {
			return nil, notFound
		}
		return nil, err
	}
	if m.Role != service.ChatAssistant {
		return nil, service.Errorf(service.ErrInvalid, "message %s is a question; rate its answer", messageID)
	}
	id, err := s.d.IDs.NextID()
	if err != nil {
		return nil, err
	}
	f := &service.Feedback{ID: id, MessageID: m.ID, ConversationID: m.ConversationID, UserID: p.UserID, Rating: in.Rating,
		Comment: comment, KnowledgeBaseIDs: m.KnowledgeBaseIDs}
	if f.KnowledgeBaseIDs == nil {
		f.KnowledgeBaseIDs = []service.ID{}
	}
	if err := store.PutFeedback(ctx, f); err != nil {
		return nil, err
	}
	return f, nil
}

func requireAdmin(p service.Principal) error {
	if !p.OverridesOwnership() {
		return service.Errorf(service.ErrForbidden, "only admins read and judge feedback")
	}
	return nil
}

// Feedbacks lists feedback for the admin page (admins signed in as people:
// the questions and answers are every user's).
func (s *Service) Feedbacks(ctx context.Context, p service.Principal, f service.FeedbackFilter) ([]service.Feedback, error) {
	store, err := s.feedbackStore()
	if err != nil {
		return nil, err
	}
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	if f.Rating != "" && !f.Rating.Valid() {
		return nil, service.Errorf(service.ErrInvalid, `rating must be "up" or "down"`)
	}
	return store.Feedbacks(ctx, f)
}

// Judge records the chunks an admin marks as the ones that answer a
// feedback's question (an empty list clears them).
func (s *Service) Judge(ctx context.Context, p service.Principal, id service.ID, in JudgeInput) (*service.Feedback, error) {
	store, err := s.feedbackStore()
	if err != nil {
		return nil, err
	}
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	if len(in.ChunkIDs) > service.MaxRelevantChunks {
		return nil, service.Errorf(service.ErrInvalid, "at most %d chunks per question", service.MaxRelevantChunks)
	}
	ids := slices.Clone(in.ChunkIDs)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	if ids == nil {
		ids = []service.ID{}
	}
	return store.JudgeFeedback(ctx, id, ids)
}

// ExportFeedback builds the evaluation set of the downvoted, judged
// feedback matching f: one query per answer (its question, by message
// id), its marked chunks as the relevant documents, and besides them the
// chunks the answer cited (the wrong ones), so retrieval has to rank the
// right ones above what it found. Chunks since deleted are left out; a
// question left with no relevant chunk is too.
func (s *Service) ExportFeedback(ctx context.Context, p service.Principal, f service.FeedbackFilter) (*service.EvalSet, error) {
	store, err := s.feedbackStore()
	if err != nil {
		return nil, err
	}
	if err := requireAdmin(p); err != nil {
		return nil, err
	}
	f.Rating, f.Judged, f.Limit = service.RatingDown, true, 1000
	var all []service.Feedback
	for {
		page, err := store.Feedbacks(ctx, f)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < f.Limit {
			break
		}
		f.Before = page[len(page)-1].ID
	}
	var chunkIDs []service.ID
	for _, fb := range all {
		chunkIDs = append(chunkIDs, fb.RelevantChunkIDs...)
		for _, src := range fb.Sources {
			chunkIDs = append(chunkIDs, src.ChunkID)
		}
	}
	slices.Sort(chunkIDs)
	docs, err := store.EvalChunks(ctx, slices.Compact(chunkIDs))
	if err != nil {
		return nil, err
	}
	live := make(map[string]bool, len(docs))
	for _, d := range docs {
		live[d.ID] = true
	}
	set := &service.EvalSet{Corpus: docs}
	seen := map[string]bool{}
	for _, fb := range all {
		qid := fb.MessageID.String()
		if seen[qid] || fb.Question == "" {
			continue // two admins' downvotes of one answer are one query
		}
		n := 0
		for _, c := range fb.RelevantChunkIDs {
			if live[c.String()] {
				set.Qrels = append(set.Qrels, service.EvalJudgement{QueryID: qid, CorpusID: c.String(), Score: 1})
				n++
			}
		}
		if n > 0 {
			seen[qid] = true
			set.Queries = append(set.Queries, service.EvalQuery{ID: qid, Text: fb.Question})
		}
	}
	if len(set.Queries) == 0 {
		return nil, service.Errorf(service.ErrNotFound, "no downvoted answer has chunks marked as right%s", filterNote(f))
	}
	return set, nil
}

func filterNote(f service.FeedbackFilter) string {
	if f.KnowledgeBaseID != 0 {
		return fmt.Sprintf(" in knowledge base %s", f.KnowledgeBaseID)
	}
	return ""
}
