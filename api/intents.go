package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// listIntents answers the whole tree: {"items": roots with their children}.
func (s *Server) listIntents(c *gin.Context) {
	tree, err := s.deps.Intents.Tree(c.Request.Context())
	serveItems(c, tree, err)
}

// deleteIntent deletes a node; one with children needs ?cascade=true.
func (s *Server) deleteIntent(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	var cascade bool
	switch c.Query("cascade") {
	case "", "false":
	case "true":
		cascade = true
	default:
		fail(c, service.Errorf(service.ErrInvalid, "cascade must be true or false"))
		return
	}
	if err := s.deps.Intents.Delete(c.Request.Context(), id, cascade); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
