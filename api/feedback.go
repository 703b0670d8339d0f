package api

import (
	"archive/zip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/chat"
)

// rateMessage serves POST /messages/{id}/feedback. The id is a message id,
// or the id of an OpenAI-compatible completion ("chatcmpl-<message id>"),
// which names the answer's message.
func (s *Server) rateMessage(c *gin.Context) {
	id, err := service.ParseID(strings.TrimPrefix(c.Param("id"), "chatcmpl-"))
	if err != nil {
		fail(c, err)
		return
	}
	var in chat.FeedbackInput
	if !s.bindJSON(c, &in) {
		return
	}
	answer(c, http.StatusOK)(s.deps.Chat.Rate(c.Request.Context(), principal(c), id, in))
}

// feedbackFilter reads the admin page's filters: ?knowledgeBaseId=,
// ?rating=up|down, ?since= and ?until= (RFC 3339 or a date, until
// exclusive), ?cursor= and ?limit=.
func feedbackFilter(c *gin.Context) (service.FeedbackFilter, bool) {
	before, limit, ok := pageParams(c)
	if !ok {
		return service.FeedbackFilter{}, false
	}
	f := service.FeedbackFilter{Rating: service.Rating(c.Query("rating")), Before: before, Limit: limit}
	if !queryID(c, "knowledgeBaseId", "a knowledge base id", &f.KnowledgeBaseID) {
		return f, false
	}
	for _, t := range []struct {
		name string
		dst  *time.Time
	}{{"since", &f.Since}, {"until", &f.Until}} {
		v := c.Query(t.name)
		if v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339, v)
		if err != nil {
			if at, err = time.Parse(time.DateOnly, v); err != nil {
				fail(c, service.Errorf(service.ErrInvalid, "%s must be an RFC 3339 time or a date (YYYY-MM-DD)", t.name))
				return f, false
			}
		}
		*t.dst = at
	}
	return f, true
}

// listFeedback serves GET /admin/feedback.
func (s *Server) listFeedback(c *gin.Context) {
	f, ok := feedbackFilter(c)
	if !ok {
		return
	}
	items, err := s.deps.Chat.Feedbacks(c.Request.Context(), principal(c), f)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, newList(items, f.Limit, func(fb service.Feedback) string { return fb.ID.String() }))
}

// exportFeedback serves GET /admin/feedback/export: the downvoted, judged
// feedback matching the filters as a zip of a BEIR folder, what
// `ragent eval export-feedback` writes.
func (s *Server) exportFeedback(c *gin.Context) {
	f, ok := feedbackFilter(c)
	if !ok {
		return
	}
	set, err := s.deps.Chat.ExportFeedback(c.Request.Context(), principal(c), f)
	if err != nil {
		fail(c, err)
		return
	}
	name := "ragent-feedback-" + time.Now().UTC().Format("20060102-150405")
	c.Header("Content-Type", "application/zip")
	c.Header("Content-Disposition", fmt.Sprintf(`attachment; filename="%s.zip"`, name))
	c.Status(http.StatusOK)
	zw := zip.NewWriter(c.Writer)
	err = set.Write(func(path string) (io.Writer, error) { return zw.Create(name + "/" + path) })
	if err == nil {
		err = zw.Close()
	}
	if err != nil {
		// The status is sent; a broken zip is what the client sees.
		s.deps.Log.WarnContext(c.Request.Context(), "feedback export failed mid-stream", "err", err)
	}
}
