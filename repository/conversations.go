package repository

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"gorm.io/gorm"

	"github.com/ragent-go/ragent/service"
)

type conversationRow struct {
	ID        int64
	UserID    int64
	Title     string
	CreatedAt time.Time
	UpdatedAt time.Time
	DeletedAt gorm.DeletedAt
}

func (conversationRow) TableName() string { return "conversations" }

func (r conversationRow) conversation() *service.Conversation {
	return &service.Conversation{ID: service.ID(r.ID), UserID: service.ID(r.UserID), Title: r.Title,
		CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt}
}

type messageRow struct {
	ID               int64
	ConversationID   int64
	Role             string
	Content          string
	Thinking         string
	Status           string
	Sources          []byte
	ReplyTo          *int64
	PromptTokens     int
	CompletionTokens int
	LatencyMs        int64
	// KnowledgeBaseIds are the knowledge bases the message's turn searched;
	// NULL on rows older than the column (unknown).
	KnowledgeBaseIds *jsonList[int64]
	CreatedAt        time.Time
}

func (messageRow) TableName() string { return "messages" }

func (r messageRow) message() (service.Message, error) {
	m := service.Message{
		ID: service.ID(r.ID), ConversationID: service.ID(r.ConversationID), Role: service.ChatRole(r.Role), Content: r.Content,
		Thinking: r.Thinking, Status: service.MessageStatus(r.Status),
		Usage: service.Usage{PromptTokens: r.PromptTokens, CompletionTokens: r.CompletionTokens,
			TotalTokens: r.PromptTokens + r.CompletionTokens},
		LatencyMS: r.LatencyMs, CreatedAt: r.CreatedAt,
	}
	if r.ReplyTo != nil {
		m.ReplyTo = service.ID(*r.ReplyTo)
	}
	if r.KnowledgeBaseIds != nil {
		m.KnowledgeBaseIDs = make([]service.ID, len(*r.KnowledgeBaseIds))
		for i, id := range *r.KnowledgeBaseIds {
			m.KnowledgeBaseIDs[i] = service.ID(id)
		}
	}
	if len(r.Sources) > 0 {
		if err := json.Unmarshal(r.Sources, &m.Sources); err != nil {
			return m, fmt.Errorf("message %d: sources: %w", r.ID, err)
		}
	}
	return m, nil
}

// withinKnowledgeBases is the condition that no message of the conversation
// (the query's "conversations" row) searched a knowledge base outside the
// bound JSON array, or an unknown set (NULL): jsonb's <@ on arrays is
// "every element is in".
const withinKnowledgeBases = `NOT EXISTS (SELECT 1 FROM messages m WHERE m.conversation_id = conversations.id
	AND (m.knowledge_base_ids IS NULL OR NOT m.knowledge_base_ids <@ ?::jsonb))`

// idList binds ids as a JSON array.
func idList(ids []service.ID) jsonList[int64] {
	out := make(jsonList[int64], len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}

// CreateConversation inserts c.
func (s *Store) CreateConversation(ctx context.Context, c *service.Conversation) error {
	row := conversationRow{ID: int64(c.ID), UserID: int64(c.UserID), Title: c.Title}
	if err := s.conn(ctx).Create(&row).Error; err != nil {
		return translate(err)
	}
	c.CreatedAt, c.UpdatedAt = row.CreatedAt, row.UpdatedAt
	return nil
}

// Conversation returns a live conversation.
func (s *Store) Conversation(ctx context.Context, id service.ID) (*service.Conversation, error) {
	return take(s.conn(ctx), conversationRow.conversation, int64(id))
}

// Conversations lists a user's live conversations, most recently active
// first; the cursor is the id of the last conversation of the previous
// page. userID 0 lists everyone's (for admins). within, when not nil, keeps
// only the conversations whose every message searched knowledge bases among
// it (an API key limited to them). The cursor must be one of the listed
// conversations (service.ErrInvalid otherwise): another user's would
// position the page by a stranger's activity time. It may have been deleted
// since the previous page was read.
func (s *Store) Conversations(ctx context.Context, userID, before service.ID, limit int, within []service.ID) ([]*service.Conversation, error) {
	q := s.conn(ctx).Order("updated_at DESC, id DESC").Limit(limit)
	if userID != 0 {
		q = q.Where("user_id = ?", int64(userID))
	}
	if within != nil {
		q = q.Where(withinKnowledgeBases, idList(within))
	}
	if before != 0 {
		cq := s.conn(ctx).Unscoped().Where("id = ?", int64(before))
		if userID != 0 {
			cq = cq.Where("user_id = ?", int64(userID))
		}
		if within != nil {
			cq = cq.Where(withinKnowledgeBases, idList(within))
		}
		var cursor []conversationRow
		if err := cq.Limit(1).Find(&cursor).Error; err != nil {
			return nil, translate(err)
		}
		if len(cursor) == 0 {
			return nil, service.Errorf(service.ErrInvalid, "invalid cursor: %s is not one of your conversations", before)
		}
		q = q.Where("(updated_at, id) < (?, ?)", cursor[0].UpdatedAt, cursor[0].ID)
	}
	return find(q, conversationRow.conversation)
}

// ConversationWithin reports whether every message of a conversation
// searched knowledge bases among within (none searched an unknown set).
func (s *Store) ConversationWithin(ctx context.Context, id service.ID, within []service.ID) (bool, error) {
	var n int64
	err := s.conn(ctx).Model(&conversationRow{}).Unscoped().
		Where("id = ?", int64(id)).Where(withinKnowledgeBases, idList(within)).Count(&n).Error
	return n > 0, translate(err)
}

// RenameConversation sets the title.
func (s *Store) RenameConversation(ctx context.Context, id service.ID, title string) error {
	return found(s.conn(ctx).Model(&conversationRow{ID: int64(id)}).Update("title", title))
}

// DeleteConversation soft-deletes a conversation; its messages stay for the record.
func (s *Store) DeleteConversation(ctx context.Context, id service.ID) error {
	return found(s.conn(ctx).Delete(&conversationRow{}, int64(id)))
}

// Messages returns up to limit messages of a conversation, oldest first,
// after the given message id.
func (s *Store) Messages(ctx context.Context, conversationID, after service.ID, limit int) ([]service.Message, error) {
	var rows []messageRow
	if err := s.conn(ctx).Where("conversation_id = ? AND id > ?", int64(conversationID), int64(after)).
		Order("id").Limit(limit).Find(&rows).Error; err != nil {
		return nil, translate(err)
	}
	return messages(rows)
}

// messages converts rows to messages in their order.
func messages(rows []messageRow) ([]service.Message, error) {
	out := make([]service.Message, len(rows))
	for i, r := range rows {
		var err error
		if out[i], err = r.message(); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// RecentMessages returns the last n messages of a conversation, oldest first.
func (s *Store) RecentMessages(ctx context.Context, conversationID service.ID, n int) ([]service.Message, error) {
	var rows []messageRow
	if err := s.conn(ctx).Where("conversation_id = ?", int64(conversationID)).
		Order("id DESC").Limit(n).Find(&rows).Error; err != nil {
		return nil, translate(err)
	}
	slices.Reverse(rows)
	return messages(rows)
}

// SaveMessage inserts a message and marks its conversation active; a title,
// when given, is set in the same transaction.
func (s *Store) SaveMessage(ctx context.Context, m *service.Message, title string) error {
	return s.WithinTx(ctx, func(tx *Store) error { return tx.saveMessage(m, title) })
}

// SaveQuestion writes a turn's question in one transaction with its new
// conversation (conv, nil for an existing one) and its submit key (submit,
// nil without one). A submit key already taken fails it with
// service.ErrDuplicateRequest and writes nothing: the unique key is what
// keeps a duplicate that passed the Redis submit lock from making a second
// conversation or question. With submit.Replaces the key moves from that
// failed attempt to this one, unless another retry moved it first.
func (s *Store) SaveQuestion(ctx context.Context, conv *service.Conversation, q *service.Message, submit *service.ChatSubmit) error {
	return s.WithinTx(ctx, func(tx *Store) error {
		if conv != nil {
			row := conversationRow{ID: int64(conv.ID), UserID: int64(conv.UserID), Title: conv.Title}
			if err := tx.db.Create(&row).Error; err != nil {
				return translate(err)
			}
			conv.CreatedAt, conv.UpdatedAt = row.CreatedAt, row.UpdatedAt
		}
		if submit != nil {
			if err := tx.takeSubmit(submit); err != nil {
				return err
			}
		}
		return tx.saveMessage(q, "")
	})
}

func (s *Store) takeSubmit(sub *service.ChatSubmit) error {
	duplicate := service.Errorf(service.ErrDuplicateRequest, "this %s was already submitted", "Idempotency-Key")
	if sub.Replaces != 0 {
		res := s.db.Exec(`UPDATE chat_submits SET conversation_id = ?, message_id = ?, task_id = ?, created_at = now()
			WHERE user_id = ? AND request_key = ? AND message_id = ?`,
			int64(sub.ConversationID), int64(sub.MessageID), int64(sub.TaskID), int64(sub.UserID), sub.Key, int64(sub.Replaces))
		if res.Error != nil {
			return translate(res.Error)
		}
		if res.RowsAffected == 0 {
			return duplicate
		}
		return nil
	}
	res := s.db.Exec(`INSERT INTO chat_submits (user_id, request_key, conversation_id, message_id, task_id)
		VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`,
		int64(sub.UserID), sub.Key, int64(sub.ConversationID), int64(sub.MessageID), int64(sub.TaskID))
	if res.Error != nil {
		return translate(res.Error)
	}
	if res.RowsAffected == 0 {
		return duplicate
	}
	return nil
}

// ChatSubmit returns userID's turn submitted under key, with its saved
// answer's status ("" while none is saved); service.ErrNotFound when none.
func (s *Store) ChatSubmit(ctx context.Context, userID service.ID, key string) (*service.ChatSubmit, error) {
	var rows []struct {
		ConversationID int64
		MessageID      int64
		TaskID         int64
		AnswerStatus   *string
	}
	if err := s.conn(ctx).Raw(`SELECT cs.conversation_id, cs.message_id, cs.task_id,
			(SELECT a.status FROM messages a WHERE a.conversation_id = cs.conversation_id AND a.reply_to = cs.message_id
				AND a.role = 'assistant' ORDER BY a.id LIMIT 1) AS answer_status
		FROM chat_submits cs WHERE cs.user_id = ? AND cs.request_key = ?`, int64(userID), key).Scan(&rows).Error; err != nil {
		return nil, translate(err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("chat submit: %w", service.ErrNotFound)
	}
	r := rows[0]
	sub := &service.ChatSubmit{UserID: userID, Key: key, ConversationID: service.ID(r.ConversationID),
		MessageID: service.ID(r.MessageID), TaskID: service.ID(r.TaskID)}
	if r.AnswerStatus != nil {
		sub.AnswerStatus = service.MessageStatus(*r.AnswerStatus)
	}
	return sub, nil
}

// PruneChatSubmits deletes up to limit chat submit keys stored (or last
// moved to a retry) before t, oldest first, and returns how many it deleted.
// A key is honoured only within the Idempotency-Key window (cmd/ragent
// prunes at idempotent.DefaultResponseTTL); past it a retry under the key
// is a new question, and its row only takes room. Batches skip rows
// another instance is deleting.
func (s *Store) PruneChatSubmits(ctx context.Context, before time.Time, limit int) (int64, error) {
	res := s.conn(ctx).Exec(`DELETE FROM chat_submits WHERE ctid IN (
		SELECT ctid FROM chat_submits WHERE created_at < ? ORDER BY created_at LIMIT ? FOR UPDATE SKIP LOCKED)`,
		before, limit)
	return res.RowsAffected, translate(res.Error)
}

// saveMessage is SaveMessage inside the receiver's transaction.
func (s *Store) saveMessage(m *service.Message, title string) error {
	srcs := m.Sources
	if srcs == nil {
		srcs = []service.Source{} // the column is NOT NULL: [] for none
	}
	sources, err := json.Marshal(srcs)
	if err != nil {
		return err
	}
	row := messageRow{
		ID: int64(m.ID), ConversationID: int64(m.ConversationID), Role: string(m.Role), Content: m.Content,
		Thinking: m.Thinking, Status: string(m.Status), Sources: sources,
		PromptTokens: m.Usage.PromptTokens, CompletionTokens: m.Usage.CompletionTokens, LatencyMs: m.LatencyMS,
	}
	// A message of a turn is always written with what the turn searched
	// ([] for nothing); only rows older than the column have NULL.
	kbs := idList(m.KnowledgeBaseIDs)
	row.KnowledgeBaseIds = &kbs
	if m.ReplyTo != 0 {
		r := int64(m.ReplyTo)
		row.ReplyTo = &r
	}
	if err := s.db.Create(&row).Error; err != nil {
		return translate(err)
	}
	m.CreatedAt = row.CreatedAt
	updates := map[string]any{"updated_at": time.Now().UTC()}
	if title != "" {
		updates["title"] = title
	}
	return translate(s.db.Model(&conversationRow{ID: row.ConversationID}).Updates(updates).Error)
}
