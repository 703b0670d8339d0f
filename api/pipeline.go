package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// importRequest is the body of POST …/documents:import.
type importRequest struct {
	URL        string `json:"url"`
	ExternalID string `json:"externalId"`
	// RefreshInterval is a Go duration ("1h"); empty or "0" fetches once.
	RefreshInterval string `json:"refreshInterval"`
}

// importDocument records a URL for the fetcher; the fetch happens on a
// worker, not in this request, so the answer is the pending document.
func (s *Server) importDocument(ctx context.Context, p service.Principal, kbID service.ID, in importRequest) (*service.Document, error) {
	var refresh time.Duration
	if in.RefreshInterval != "" {
		d, err := time.ParseDuration(in.RefreshInterval)
		if err != nil {
			return nil, service.Errorf(service.ErrInvalid, "refreshInterval must be a duration such as 30m or 24h")
		}
		refresh = d
	}
	return s.deps.Ingest.Import(ctx, p, kbID, in.URL, in.ExternalID, refresh)
}

// deleteDocumentByExternalID is DELETE …/documents?externalId=.
func (s *Server) deleteDocumentByExternalID(c *gin.Context) {
	kbID, ok := pathID(c, "id")
	if !ok {
		return
	}
	ext := c.Query("externalId")
	if ext == "" {
		fail(c, service.Errorf(service.ErrInvalid, "externalId is required: DELETE /api/v1/documents/{id} deletes by id"))
		return
	}
	if err := s.deps.Ingest.DeleteByExternalID(c.Request.Context(), principal(c), kbID, ext); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}

// documentQuery reads the listing's filters: ?externalId=, ?status=,
// ?updatedSince= (RFC 3339) and the cursor.
func documentQuery(c *gin.Context) (service.DocumentQuery, bool) {
	before, limit, ok := pageParams(c)
	if !ok {
		return service.DocumentQuery{}, false
	}
	q := service.DocumentQuery{Before: before, Limit: limit, ExternalID: c.Query("externalId"),
		Status: service.DocumentStatus(c.Query("status"))}
	if v := c.Query("updatedSince"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			fail(c, service.Errorf(service.ErrInvalid, "updatedSince must be an RFC 3339 time such as 2026-01-02T15:04:05Z"))
			return q, false
		}
		q.UpdatedSince = t
	}
	return q, true
}
