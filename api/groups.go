package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/admin"
)

func (s *Server) listGroups(c *gin.Context) {
	after, limit, ok := pageParams(c)
	if !ok {
		return
	}
	groups, err := s.deps.Groups.List(c.Request.Context(), principal(c), after, limit)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, newList(groups, limit, func(g *service.Group) string { return g.ID.String() }))
}

func (s *Server) createGroup(c *gin.Context) {
	var in admin.GroupInput
	if !s.bindJSON(c, &in) {
		return
	}
	g, err := s.deps.Groups.Create(c.Request.Context(), principal(c), in)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, g)
}

func (s *Server) updateGroup(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	var in admin.GroupInput
	if !s.bindJSON(c, &in) {
		return
	}
	g, err := s.deps.Groups.Update(c.Request.Context(), principal(c), id, in)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, g)
}

func (s *Server) deleteGroup(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	if err := s.deps.Groups.Delete(c.Request.Context(), principal(c), id); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// listGroupMembers answers every member in one page:
// {"items":[user…],"nextCursor":null}.
func (s *Server) listGroupMembers(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	users, err := s.deps.Groups.Members(c.Request.Context(), principal(c), id)
	if err != nil {
		fail(c, err)
		return
	}
	if users == nil {
		users = []*service.User{}
	}
	c.JSON(http.StatusOK, gin.H{"items": users, "nextCursor": nil})
}

// addGroupMember answers 201 with the user added.
func (s *Server) addGroupMember(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	var in admin.GroupMemberInput
	if !s.bindJSON(c, &in) {
		return
	}
	u, err := s.deps.Groups.AddMember(c.Request.Context(), principal(c), id, in)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, u)
}

func (s *Server) removeGroupMember(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	userID, ok := pathID(c, "userId")
	if !ok {
		return
	}
	if err := s.deps.Groups.RemoveMember(c.Request.Context(), principal(c), id, userID); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
