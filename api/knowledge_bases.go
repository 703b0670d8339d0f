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
	kbs, err := s.deps.KnowledgeBases.List(c.Request.Context(), principal(c), after, limit)
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
	kb, err := s.deps.KnowledgeBases.Get(c.Request.Context(), principal(c), id)
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
	kb, err := s.deps.KnowledgeBases.Create(c.Request.Context(), principal(c), in)
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
	kb, err := s.deps.KnowledgeBases.Update(c.Request.Context(), principal(c), id, in)
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
	if err := s.deps.KnowledgeBases.Delete(c.Request.Context(), principal(c), id); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// listMembers answers {"items":[…],"nextCursor":null}: a knowledge base has
// few grants, so they come in one page.
func (s *Server) listMembers(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	members, err := s.deps.KnowledgeBases.Members(c.Request.Context(), principal(c), id)
	if err != nil {
		fail(c, err)
		return
	}
	if members == nil {
		members = []*service.KBMember{}
	}
	c.JSON(http.StatusOK, gin.H{"items": members, "nextCursor": nil})
}

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

func (s *Server) removeMember(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	memberID, ok := pathID(c, "memberId")
	if !ok {
		return
	}
	if err := s.deps.KnowledgeBases.RemoveMember(c.Request.Context(), principal(c), id, memberID); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
