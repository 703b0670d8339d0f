package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// listTermMappings answers every mapping in one page: admins curate tens or
// hundreds of them, and the chat pipeline applies all of them anyway.
func (s *Server) listTermMappings(c *gin.Context) {
	ms, err := s.deps.Terms.List(c.Request.Context())
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, newList(ms, 0, func(service.TermMapping) string { return "" }))
}
