package api

import (
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/usage"
)

// quotaGate refuses a chat, an OpenAI-compatible call or a search whose
// caller is over a quota (429 quota_exceeded with Retry-After until the
// quota resets), before the handler reads or writes anything.
func (s *Server) quotaGate(c *gin.Context) {
	if err := s.deps.Quotas.Admit(c.Request.Context(), principal(c)); err != nil {
		fail(c, err)
		return
	}
	c.Next()
}

// usageReport serves GET /api/v1/usage: the caller's usage, or (admins,
// ?all=true or ?userId=) anyone's, over ?from= and ?to= (YYYY-MM-DD, UTC;
// default the current month), grouped by ?groupBy= (comma-separated:
// user, group, key, model, day, kind, knowledgeBase), at most ?limit= rows.
func (s *Server) usageReport(c *gin.Context) {
	in := usage.UsageInput{From: c.Query("from"), To: c.Query("to")}
	if v := c.Query("groupBy"); v != "" {
		in.GroupBy = strings.Split(v, ",")
	}
	switch v := c.Query("all"); v {
	case "", "false":
	case "true":
		in.All = true
	default:
		fail(c, service.Errorf(service.ErrInvalid, "all must be true or false"))
		return
	}
	if !queryID(c, "userId", "an id", &in.UserID) {
		return
	}
	if v := c.Query("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fail(c, service.Errorf(service.ErrInvalid, "limit must be between 1 and 1000"))
			return
		}
		in.Limit = n
	}
	rows, err := s.deps.Quotas.Report(c.Request.Context(), principal(c), in)
	serveItems(c, rows, err)
}

// listQuotas serves GET /api/v1/admin/quotas.
func (s *Server) listQuotas(c *gin.Context) {
	qs, err := s.deps.Quotas.List(c.Request.Context(), principal(c))
	serveItems(c, qs, err)
}

// deleteQuota serves DELETE /api/v1/admin/quotas/:subject/:id.
func (s *Server) deleteQuota(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	noContent(c, s.deps.Quotas.Delete(c.Request.Context(), principal(c), service.QuotaSubject(c.Param("subject")), id))
}
