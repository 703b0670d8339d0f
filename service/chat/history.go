package chat

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
)

// history returns the turns the rewrite and the prompt see: the client's
// own (Request.History) when it sent any, else the stored conversation's.
func (t *turn) history(ctx context.Context) ([]service.Message, error) {
	n := t.s.cfg.HistoryMessages
	if len(t.req.History) > 0 {
		msgs := make([]service.Message, 0, len(t.req.History))
		for _, m := range t.req.History {
			if strings.TrimSpace(m.Content) != "" {
				msgs = append(msgs, service.Message{Role: m.Role, Content: m.Content, Status: service.MessageCompleted})
			}
		}
		return msgs[max(0, len(msgs)-n):], nil
	}
	msgs, err := t.s.d.Store.RecentMessages(ctx, t.conv.ID, n+1)
	if err != nil {
		return nil, err
	}
	// The conversation was within a limited key's knowledge bases when the
	// turn began; a turn its owner added since may not be, and then none of
	// it reaches the model.
	for _, m := range msgs {
		if m.ID != t.question.ID && !t.p.Key.Within(m.KnowledgeBaseIDs) {
			return nil, service.Errorf(service.ErrNotFound, "conversation %s not found", t.conv.ID)
		}
	}
	return usableHistory(msgs, t.question.ID, n), nil
}

// validateClientContext checks what a client sends besides its question:
// earlier turns (user or assistant, each bounded) and instructions.
func validateClientContext(req *Request) error {
	for i, m := range req.History {
		if m.Role != service.ChatUser && m.Role != service.ChatAssistant {
			return service.Errorf(service.ErrInvalid, "history message %d has role %q; only user and assistant turns are history", i, m.Role)
		}
		if !utf8.ValidString(m.Content) {
			return service.Errorf(service.ErrInvalid, "history message %d must be valid UTF-8", i)
		}
		// A user's turn is bounded like a question, an answer by
		// MaxHistoryMessageRunes.
		limit := service.MaxHistoryMessageRunes
		if m.Role == service.ChatUser {
			limit = service.MaxQuestionRunes
		}
		if utf8.RuneCountInString(m.Content) > limit {
			return service.Errorf(service.ErrInvalid, "history message %d (%s) must be at most %d characters", i, m.Role, limit)
		}
	}
	req.Instructions = strings.TrimSpace(req.Instructions)
	if !utf8.ValidString(req.Instructions) {
		return service.Errorf(service.ErrInvalid, "instructions must be valid UTF-8")
	}
	if utf8.RuneCountInString(req.Instructions) > service.MaxInstructionRunes {
		return service.Errorf(service.ErrInvalid, "instructions must be at most %d characters", service.MaxInstructionRunes)
	}
	return nil
}
