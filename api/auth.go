package api

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/auth"
)

type loginRequest struct {
	Username string `json:"username"`
	Password string `json:"password"`
}

// DeviceCookie marks a client that signed in before (auth's device
// cookies): sent only to the login route, where it lets the client past the
// shared per-account lockout.
const DeviceCookie = "ragent_device"

func (s *Server) login(c *gin.Context) {
	var req loginRequest
	if !s.bindJSON(c, &req) {
		return
	}
	device, _ := c.Cookie(DeviceCookie)
	sess, err := s.deps.Auth.Login(c.Request.Context(), auth.Credentials{Username: req.Username, Password: req.Password, Device: device}, c.ClientIP())
	if err != nil {
		failWithRetryAfter(c, err)
		return
	}
	s.setSessionCookie(c, sess.Token, time.Until(sess.Expires))
	if sess.Device != "" {
		http.SetCookie(c.Writer, &http.Cookie{
			Name: DeviceCookie, Value: sess.Device, Path: "/api/v1/auth/login", MaxAge: int(auth.DeviceTTL / time.Second),
			Secure: s.deps.SecureCookie, HttpOnly: true, SameSite: http.SameSiteStrictMode,
		})
	}
	c.JSON(http.StatusOK, sess)
}

// endSessions answers 204 once end has ended the caller's sessions (this
// one, or every one on every instance), and clears the cookie.
func (s *Server) endSessions(end func(context.Context, service.Principal) error) gin.HandlerFunc {
	return func(c *gin.Context) {
		if err := end(c.Request.Context(), principal(c)); err != nil {
			fail(c, err)
			return
		}
		s.setSessionCookie(c, "", -time.Second)
		c.Status(http.StatusNoContent)
	}
}

// changePassword changes the caller's own password. Every other session ends;
// the answer is a new session (and cookie) for this one.
func (s *Server) changePassword(c *gin.Context) {
	var in auth.PasswordChange
	if !s.bindJSON(c, &in) {
		return
	}
	sess, err := s.deps.Auth.ChangePassword(c.Request.Context(), principal(c), in, c.ClientIP())
	if err != nil {
		failWithRetryAfter(c, err)
		return
	}
	s.setSessionCookie(c, sess.Token, time.Until(sess.Expires))
	c.JSON(http.StatusOK, sess)
}

// failWithRetryAfter is fail for the password-attempt limit, whose busy
// error says in its details how long the pause lasts.
func failWithRetryAfter(c *gin.Context, err error) {
	var de *service.Error
	if errors.As(err, &de) && errors.Is(err, service.ErrBusy) && de.Details["retryAfter"] != "" {
		c.Header("Retry-After", de.Details["retryAfter"])
	}
	fail(c, err)
}

func (s *Server) setSessionCookie(c *gin.Context, token string, ttl time.Duration) {
	c.SetSameSite(http.SameSiteLaxMode)
	c.SetCookie(SessionCookie, token, int(ttl.Seconds()), "/", "", s.deps.SecureCookie, true)
}

func (s *Server) me(c *gin.Context) {
	u, err := s.deps.Auth.Me(c.Request.Context(), principal(c))
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, u)
}

// limits serves the input limits the use cases enforce, for the web UI's
// forms.
func (s *Server) limits(c *gin.Context) { c.JSON(http.StatusOK, service.InputLimits) }

// list is the JSON shape of every paged list.
type list[T any] struct {
	Items      []T     `json:"items"`
	NextCursor *string `json:"nextCursor"`
}

// serveItems answers {"items": items} ([] for none) for a list that is not
// paged, or err.
func serveItems[T any](c *gin.Context, items []T, err error) {
	if err != nil {
		fail(c, err)
		return
	}
	if items == nil {
		items = []T{}
	}
	c.JSON(http.StatusOK, gin.H{"items": items})
}

func newList[T any](items []T, limit int, cursor func(T) string) list[T] {
	if items == nil {
		items = []T{}
	}
	l := list[T]{Items: items}
	if limit > 0 && len(items) == limit {
		next := cursor(items[len(items)-1])
		l.NextCursor = &next
	}
	return l
}

// pageParams reads ?cursor= and ?limit= (1..200, default 50).
func pageParams(c *gin.Context) (after service.ID, limit int, ok bool) {
	limit = 50
	if v := c.Query("limit"); v != "" {
		n, err := parsePositiveInt(v)
		if err != nil || n > 200 {
			fail(c, service.Errorf(service.ErrInvalid, "limit must be between 1 and 200"))
			return 0, 0, false
		}
		limit = n
	}
	if v := c.Query("cursor"); v != "" {
		id, err := service.ParseID(v)
		if err != nil {
			fail(c, service.Errorf(service.ErrInvalid, "invalid cursor"))
			return 0, 0, false
		}
		after = id
	}
	return after, limit, true
}

func parsePositiveInt(s string) (int, error) {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return 0, strconv.ErrSyntax
	}
	return n, nil
}
