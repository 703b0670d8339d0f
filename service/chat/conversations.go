package chat

import (
	"context"
	"strings"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
)

// Conversations lists the caller's conversations, most recent first; an
// API key limited to knowledge bases lists only those whose every turn
// searched within its list (KeyGrant.Within).
func (s *Service) Conversations(ctx context.Context, p service.Principal, before service.ID, limit int) ([]*service.Conversation, error) {
	return s.d.Store.Conversations(ctx, p.UserID, before, limit, p.Key.HistoryLimit())
}

// Messages returns a conversation's messages, oldest first. Admins may
// read any conversation; others only their own. Sources the reader can no
// longer read are left out of the answers.
func (s *Service) Messages(ctx context.Context, p service.Principal, id, after service.ID, limit int) ([]service.Message, error) {
	if _, err := s.ownConversation(ctx, p, id, true); err != nil {
		return nil, err
	}
	msgs, err := s.d.Store.Messages(ctx, id, after, limit)
	if err != nil {
		return nil, err
	}
	if err := s.visibleSources(ctx, p, msgs); err != nil {
		return nil, err
	}
	return msgs, nil
}

// Rename sets a conversation's title.
func (s *Service) Rename(ctx context.Context, p service.Principal, id service.ID, title string) (*service.Conversation, error) {
	title = strings.TrimSpace(title)
	if title == "" || utf8.RuneCountInString(title) > 100 {
		return nil, service.Errorf(service.ErrInvalid, "title must be 1 to 100 characters")
	}
	c, err := s.ownConversation(ctx, p, id, false)
	if err != nil {
		return nil, err
	}
	if err := s.d.Store.RenameConversation(ctx, id, title); err != nil {
		return nil, err
	}
	c.Title = title
	return c, nil
}

// Delete hides a conversation from its owner (soft delete).
func (s *Service) Delete(ctx context.Context, p service.Principal, id service.ID) error {
	if _, err := s.ownConversation(ctx, p, id, false); err != nil {
		return err
	}
	return s.d.Store.DeleteConversation(ctx, id)
}
