package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
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

func (s *Server) createTermMapping(c *gin.Context) {
	var in admin.TermInput
	if !s.bindJSON(c, &in) {
		return
	}
	m, err := s.deps.Terms.Create(c.Request.Context(), in)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, m)
}

func (s *Server) updateTermMapping(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	var in admin.TermInput
	if !s.bindJSON(c, &in) {
		return
	}
	m, err := s.deps.Terms.Update(c.Request.Context(), id, in)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, m)
}

func (s *Server) deleteTermMapping(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	if err := s.deps.Terms.Delete(c.Request.Context(), id); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
