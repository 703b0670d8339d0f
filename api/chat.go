package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service/chat"
)

// chatStream answers POST /chat with the event stream of DESIGN §6. A
// request that fails validation gets a JSON error instead.
func (s *Server) chatStream(c *gin.Context) {
	var req chat.Request
	if !s.bindJSON(c, &req) {
		return
	}
	ctx := c.Request.Context()
	sse := newSSEWriter(c.Writer)
	defer sse.keepAlive(s.deps.PingInterval)()
	err := s.deps.Chat.Chat(ctx, principal(c), req, func(e chat.Event) error {
		if e.Name == chat.EventDone {
			return sse.event(e.Name, nil, "[DONE]")
		}
		return sse.event(e.Name, e.Data, "")
	})
	if err != nil {
		fail(c, err)
	}
}

func (s *Server) stopChat(c *gin.Context) {
	id, ok := pathID(c, "taskId")
	if !ok {
		return
	}
	if err := s.deps.Chat.Stop(c.Request.Context(), principal(c), id); err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"taskId": id, "stopped": true})
}
