package api

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// listAudit serves GET /api/v1/admin/audit: the audit log, newest first,
// filtered by ?actor= (a user id), ?action=, ?target= (a target id),
// ?result=, ?since= and ?until= (RFC 3339), paged by ?cursor= and ?limit=.
func (s *Server) listAudit(c *gin.Context) {
	before, limit, ok := pageParams(c)
	if !ok {
		return
	}
	f := service.AuditFilter{
		Action: c.Query("action"), TargetID: c.Query("target"), Result: service.AuditResult(c.Query("result")),
		Before: before, Limit: limit,
	}
	if v := c.Query("actor"); v != "" {
		id, err := service.ParseID(v)
		if err != nil {
			fail(c, service.Errorf(service.ErrInvalid, "actor must be a user id"))
			return
		}
		f.ActorUserID = id
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		if v := c.Query(t.name); v != "" {
			at, err := time.Parse(time.RFC3339, v)
			if err != nil {
				fail(c, service.Errorf(service.ErrInvalid, "%s must be an RFC 3339 time", t.name))
				return
			}
			*t.dst = at
		}
	}
	for _, v := range []string{f.Action, f.TargetID} {
		if err := checkText("a filter", v); err != nil {
			fail(c, err)
			return
		}
	}
	events, next, err := s.deps.Audit.List(c.Request.Context(), principal(c), f)
	if err != nil {
		fail(c, err)
		return
	}
	l := newList(events, 0, func(*service.AuditEvent) string { return "" })
	if next != 0 {
		cursor := next.String()
		l.NextCursor = &cursor
	}
	c.JSON(http.StatusOK, l)
}
