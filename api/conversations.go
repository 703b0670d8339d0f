package api

import (
	"context"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// conversationMessages answers {"messages":[…]} oldest first; ?cursor= is
// the last message id seen, ?limit= up to 200 (default 200).
func (s *Server) conversationMessages(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	after, limit, ok := pageParams(c)
	if !ok {
		return
	}
	if c.Query("limit") == "" {
		limit = 200
	}
	msgs, err := s.deps.Chat.Messages(c.Request.Context(), principal(c), id, after, limit)
	if err != nil {
		fail(c, err)
		return
	}
	if msgs == nil {
		msgs = []service.Message{}
	}
	c.JSON(http.StatusOK, gin.H{"messages": msgs})
}

type renameRequest struct {
	Title string `json:"title"`
}

func (s *Server) renameConversation(ctx context.Context, p service.Principal, id service.ID, req renameRequest) (*service.Conversation, error) {
	return s.deps.Chat.Rename(ctx, p, id, req.Title)
}
