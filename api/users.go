package api

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/auth"
)

func (s *Server) listUsers(c *gin.Context) {
	after, limit, ok := pageParams(c)
	if !ok {
		return
	}
	users, err := s.deps.Auth.ListUsers(c.Request.Context(), principal(c), after, limit)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, newList(users, limit, func(u *service.User) string { return u.ID.String() }))
}

func (s *Server) createUser(c *gin.Context) {
	var in auth.UserInput
	if !s.bindJSON(c, &in) {
		return
	}
	u, err := s.deps.Auth.CreateUser(c.Request.Context(), principal(c), in)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusCreated, u)
}

func (s *Server) updateUser(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	var in auth.UserInput
	if !s.bindJSON(c, &in) {
		return
	}
	u, err := s.deps.Auth.UpdateUser(c.Request.Context(), principal(c), id, in)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, u)
}

func (s *Server) deleteUser(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	if err := s.deps.Auth.DeleteUser(c.Request.Context(), principal(c), id); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

func parsePositiveInt(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, strconv.ErrSyntax
	}
	return n, nil
}
