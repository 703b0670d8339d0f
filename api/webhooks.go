package api

import (
	"net/http"

	"github.com/gin-gonic/gin"
)

// createWebhook answers 201 with the webhook and its secret, which is
// shown this once (no-store, like an API key).
func (s *Server) createWebhook(c *gin.Context) {
	kbID, ok := pathID(c, "id")
	if !ok {
		return
	}
	var in struct {
		URL string `json:"url"`
	}
	if !s.bindJSON(c, &in) {
		return
	}
	w, err := s.deps.Ingest.CreateWebhook(c.Request.Context(), principal(c), kbID, in.URL)
	if err != nil {
		fail(c, err)
		return
	}
	c.Header("Cache-Control", "no-store")
	c.JSON(http.StatusCreated, w)
}

func (s *Server) listWebhooks(c *gin.Context) {
	kbID, ok := pathID(c, "id")
	if !ok {
		return
	}
	hooks, err := s.deps.Ingest.Webhooks(c.Request.Context(), principal(c), kbID)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, newList(hooks, 0, nil))
}

func (s *Server) deleteWebhook(c *gin.Context) {
	kbID, ok := pathID(c, "id")
	if !ok {
		return
	}
	id, ok := pathID(c, "webhookId")
	if !ok {
		return
	}
	if err := s.deps.Ingest.DeleteWebhook(c.Request.Context(), principal(c), kbID, id); err != nil {
		fail(c, err)
		return
	}
	c.Status(http.StatusNoContent)
}
