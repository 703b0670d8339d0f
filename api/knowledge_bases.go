package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
)

func (s *Server) listKnowledgeBases(c *gin.Context) {
	after, limit, ok := pageParams(c)
	if !ok {
		return
	}
	kbs, err := s.deps.KnowledgeBases.List(c.Request.Context(), after, limit)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, newList(kbs, limit, func(kb *service.KnowledgeBase) string { return kb.ID.String() }))
}

func (s *Server) getKnowledgeBase(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	kb, err := s.deps.KnowledgeBases.Get(c.Request.Context(), id)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, kb)
}

func (s *Server) createKnowledgeBase(c *gin.Context) {
	var in admin.KnowledgeBaseInput
	if !s.bindJSON(c, &in) {
		return
	}
	kb, err := s.deps.KnowledgeBases.Create(c.Request.Context(), in)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, kb)
}

func (s *Server) updateKnowledgeBase(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	var in admin.KnowledgeBaseInput
	if !s.bindJSON(c, &in) {
		return
	}
	kb, err := s.deps.KnowledgeBases.Update(c.Request.Context(), id, in)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, kb)
}

func (s *Server) deleteKnowledgeBase(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	if err := s.deps.KnowledgeBases.Delete(c.Request.Context(), id); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
