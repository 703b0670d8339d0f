package repository

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Answer feedback (migration 0020).

// Message returns one message.
func (s *Store) Message(ctx context.Context, id service.ID) (*service.Message, error) {
	row, err := take(s.conn(ctx), func(r messageRow) messageRow { return r }, int64(id))
	if err != nil {
		return nil, err
	}
	m, err := row.message()
	if err != nil {
		return nil, err
	}
	return &m, nil
}

// PutFeedback records f (a user's rating of a message), replacing the
// user's earlier rating of it, and fills in its id and times (the id of
// the first rating is kept).
func (s *Store) PutFeedback(ctx context.Context, f *service.Feedback) error {
	var row struct {
		ID                   int64
		CreatedAt, UpdatedAt time.Time
		RelevantChunkIds     jsonList[int64]
	}
	if err := s.conn(ctx).Raw(`INSERT INTO message_feedback (id, message_id, conversation_id, user_id, rating, comment, kb_ids)
		VALUES (?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (message_id, user_id) DO UPDATE SET rating = excluded.rating, comment = excluded.comment, updated_at = now()
		RETURNING id, created_at, updated_at, relevant_chunk_ids`,
		int64(f.ID), int64(f.MessageID), int64(f.ConversationID), int64(f.UserID), string(f.Rating), f.Comment,
		idList(f.KnowledgeBaseIDs)).Scan(&row).Error; err != nil {
		return translate(err)
	}
	f.ID, f.CreatedAt, f.UpdatedAt = service.ID(row.ID), row.CreatedAt, row.UpdatedAt
	f.RelevantChunkIDs = ids(row.RelevantChunkIds)
	return nil
}

func ids(l jsonList[int64]) []service.ID {
	out := make([]service.ID, len(l))
	for i, v := range l {
		out[i] = service.ID(v)
	}
	return out
}

type feedbackRow struct {
	ID, MessageID, ConversationID, UserID int64
	Username, Rating, Comment             string
	KbIds, RelevantChunkIds               jsonList[int64]
	CreatedAt, UpdatedAt                  time.Time
	Question, Answer                      string
	Sources                               []byte
}

func (r feedbackRow) feedback() service.Feedback {
	f := service.Feedback{ID: service.ID(r.ID), MessageID: service.ID(r.MessageID), ConversationID: service.ID(r.ConversationID),
		UserID: service.ID(r.UserID), Username: r.Username, Rating: service.Rating(r.Rating), Comment: r.Comment,
		KnowledgeBaseIDs: ids(r.KbIds), RelevantChunkIDs: ids(r.RelevantChunkIds), CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
		Question: r.Question, Answer: r.Answer}
	// Sources were written by the chat pipeline; an unreadable value is
	// shown as none rather than failing the page.
	_ = json.Unmarshal(r.Sources, &f.Sources)
	return f
}

// Feedbacks lists feedback matching f, newest first, with the question,
// the answer and its sources.
func (s *Store) Feedbacks(ctx context.Context, f service.FeedbackFilter) ([]service.Feedback, error) {
	var (
		where []string
		args  []any
	)
	if f.KnowledgeBaseID != 0 {
		where, args = append(where, "f.kb_ids @> ?::jsonb"), append(args, idList([]service.ID{f.KnowledgeBaseID}))
	}
	if f.Rating != "" {
		where, args = append(where, "f.rating = ?"), append(args, string(f.Rating))
	}
	if !f.Since.IsZero() {
		where, args = append(where, "f.created_at >= ?"), append(args, f.Since)
	}
	if !f.Until.IsZero() {
		where, args = append(where, "f.created_at < ?"), append(args, f.Until)
	}
	if f.Judged {
		where = append(where, "f.relevant_chunk_ids <> '[]'::jsonb")
	}
	if f.Before != 0 {
		where, args = append(where, "f.id < ?"), append(args, int64(f.Before))
	}
	cond := ""
	if len(where) > 0 {
		cond = "WHERE " + strings.Join(where, " AND ")
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 50
	}
	var rows []feedbackRow
	if err := s.conn(ctx).Raw(`SELECT f.id, f.message_id, f.conversation_id, f.user_id, coalesce(u.username, '') AS username,
			f.rating, f.comment, f.kb_ids, f.relevant_chunk_ids, f.created_at, f.updated_at,
			coalesce(q.content, '') AS question, a.content AS answer, a.sources
		FROM message_feedback f JOIN messages a ON a.id = f.message_id
		LEFT JOIN messages q ON q.id = a.reply_to LEFT JOIN users u ON u.id = f.user_id
		`+cond+` ORDER BY f.id DESC LIMIT ?`, append(args, limit)...).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	return convert(rows, feedbackRow.feedback), nil
}

// JudgeFeedback records the chunks an admin marks as the right ones for a
// feedback's question; they must be live chunks of the knowledge bases the
// answer searched (of any knowledge base when it searched none).
func (s *Store) JudgeFeedback(ctx context.Context, id service.ID, chunkIDs []service.ID) (*service.Feedback, error) {
	err := s.WithinTx(ctx, func(tx *Store) error {
		var kbs []jsonList[int64]
		if err := tx.db.Raw(`SELECT kb_ids FROM message_feedback WHERE id = ? FOR UPDATE`, int64(id)).Scan(&kbs).Error; err != nil {
			return translate(err)
		}
		if len(kbs) == 0 {
			return service.Errorf(service.ErrNotFound, "feedback %s not found", id)
		}
		if len(chunkIDs) > 0 {
			var n int
			q := `SELECT count(*) FROM chunks WHERE id = ANY(?)`
			args := []any{idArray(chunkIDs)}
			if len(kbs[0]) > 0 {
				q += ` AND kb_id = ANY(?)`
				args = append(args, intArray(kbs[0]))
			}
			if err := tx.db.Raw(q, args...).Scan(&n).Error; err != nil {
				return translate(err)
			}
			if n != len(chunkIDs) {
				return service.Errorf(service.ErrInvalid, "%d of the %d chunks are not chunks of the answer's knowledge bases", len(chunkIDs)-n, len(chunkIDs))
			}
		}
		return translate(tx.db.Exec(`UPDATE message_feedback SET relevant_chunk_ids = ?, updated_at = now() WHERE id = ?`,
			idList(chunkIDs), int64(id)).Error)
	})
	if err != nil {
		return nil, err
	}
	out, err := s.Feedbacks(ctx, service.FeedbackFilter{Before: id + 1, Limit: 1})
	if err != nil || len(out) == 0 || out[0].ID != id {
		return nil, cmpErr(err, service.ErrNotFound)
	}
	return &out[0], nil
}

func cmpErr(err, otherwise error) error {
	if err != nil {
		return err
	}
	return otherwise
}

// EvalChunks returns the live chunks among ids as evaluation documents:
// the id, the document's name and section as the title, the content.
func (s *Store) EvalChunks(ctx context.Context, chunkIDs []service.ID) ([]service.EvalDocument, error) {
	var rows []struct {
		ID      int64
		Name    string
		Section string
		Content string
	}
	if err := s.conn(ctx).Raw(`SELECT c.id, d.name, c.section, c.content FROM chunks c JOIN documents d ON d.id = c.document_id
		WHERE c.id = ANY(?) AND d.deleted_at IS NULL ORDER BY c.id`, idArray(chunkIDs)).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	out := make([]service.EvalDocument, len(rows))
	for i, r := range rows {
		title := r.Name
		if r.Section != "" {
			title += service.SectionSeparator + r.Section
		}
		out[i] = service.EvalDocument{ID: service.ID(r.ID).String(), Title: title, Text: r.Content}
	}
	return out, nil
}
