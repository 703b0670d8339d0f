package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service/admin"
)

// putMember grants a role (201) or changes an existing grant's role (200).
func (s *Server) putMember(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	var in admin.MemberInput
	if !s.bindJSON(c, &in) {
		return
	}
	m, created, err := s.deps.KnowledgeBases.PutMember(c.Request.Context(), principal(c), id, in)
	if err != nil {
		fail(c, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	c.JSON(status, m)
}
