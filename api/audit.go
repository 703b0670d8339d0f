package api

import (
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// adminAudited names the audited action of each admin-only change, so a
// non-admin's attempt, refused by requireAdmin before any use case runs, is
// still recorded: a route and the path parameter holding its target.
var adminAudited = map[string]struct{ action, targetType, param string }{
	"POST /api/v1/users":                        {service.AuditUserCreate, service.TargetUser, ""},
	"PATCH /api/v1/users/:id":                   {service.AuditUserUpdate, service.TargetUser, "id"},
	"DELETE /api/v1/users/:id":                  {service.AuditUserDelete, service.TargetUser, "id"},
	"POST /api/v1/groups":                       {service.AuditGroupCreate, service.TargetGroup, ""},
	"PATCH /api/v1/groups/:id":                  {service.AuditGroupUpdate, service.TargetGroup, "id"},
	"DELETE /api/v1/groups/:id":                 {service.AuditGroupDelete, service.TargetGroup, "id"},
	"POST /api/v1/groups/:id/members":           {service.AuditGroupMemberAdd, service.TargetGroup, "id"},
	"DELETE /api/v1/groups/:id/members/:userId": {service.AuditGroupMemberRemove, service.TargetGroup, "id"},
	"POST /api/v1/admin/intents":                {service.AuditIntentCreate, service.TargetIntent, ""},
	"PUT /api/v1/admin/intents/:id":             {service.AuditIntentUpdate, service.TargetIntent, "id"},
	"DELETE /api/v1/admin/intents/:id":          {service.AuditIntentDelete, service.TargetIntent, "id"},
	"POST /api/v1/admin/term-mappings":          {service.AuditTermCreate, service.TargetTermMapping, ""},
	"PUT /api/v1/admin/term-mappings/:id":       {service.AuditTermUpdate, service.TargetTermMapping, "id"},
	"DELETE /api/v1/admin/term-mappings/:id":    {service.AuditTermDelete, service.TargetTermMapping, "id"},
	"PUT /api/v1/admin/quotas":                  {service.AuditQuotaPut, service.TargetQuota, ""},
	"DELETE /api/v1/admin/quotas/:subject/:id":  {service.AuditQuotaDelete, service.TargetQuota, "id"},
}

// auditRefusal records err as the result of the audited change the request
// attempted, if it attempted one.
func (s *Server) auditRefusal(c *gin.Context, err error) {
	a, ok := adminAudited[c.Request.Method+" "+c.FullPath()]
	if !ok || s.deps.Auditor == nil {
		return
	}
	ev := service.AuditEvent{Action: a.action, TargetType: a.targetType}
	if a.param != "" {
		ev.TargetID = c.Param(a.param)
	}
	s.deps.Auditor.Fail(c.Request.Context(), ev, err)
}

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
	if !queryID(c, "actor", "a user id", &f.ActorUserID) {
		return
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
