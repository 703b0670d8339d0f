package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

func (s *Server) listConversations(c *gin.Context) {
	before, limit, ok := pageParams(c)
	if !ok {
		return
	}
	convs, err := s.deps.Chat.Conversations(c.Request.Context(), principal(c), before, limit)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, newList(convs, limit, func(cv *service.Conversation) string { return cv.ID.String() }))
}

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

func (s *Server) renameConversation(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	var req renameRequest
	if !s.bindJSON(c, &req) {
		return
	}
	conv, err := s.deps.Chat.Rename(c.Request.Context(), principal(c), id, req.Title)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, conv)
}

func (s *Server) deleteConversation(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	if err := s.deps.Chat.Delete(c.Request.Context(), principal(c), id); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
