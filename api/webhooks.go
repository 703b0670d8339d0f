package api

import (
	"context"

	"github.com/ragent-go/ragent/service"
)

type webhookRequest struct {
	URL string `json:"url"`
}

// createWebhook makes a knowledge base's webhook; the router answers 201
// with it and its secret, which is shown this once (no-store, like an API
// key).
func (s *Server) createWebhook(ctx context.Context, p service.Principal, kbID service.ID, in webhookRequest) (*service.Webhook, error) {
	return s.deps.Ingest.CreateWebhook(ctx, p, kbID, in.URL)
}
