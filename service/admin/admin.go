// Package admin is what is curated: knowledge bases with their members
// (managed by their managers, created by admins), the groups knowledge bases
// are shared with, the intent tree that routes questions, and the term
// mappings that rewrite jargon, and reading the audit log. Who may do what
// with a knowledge base is service.Access's decision, asked by every method
// that takes a principal; every change is recorded through service.Auditor.
package admin

import (
	"cmp"
	"context"
	"log/slog"
)

// Config is what Intents and Terms take besides their stores.
type Config struct {
	Logger *slog.Logger // failed cache invalidations; nil discards
}

// cached is the part of Intents and Terms that drops a cached copy after
// each committed write.
type cached struct {
	cache Invalidator
	what  string // "intent tree", "term mappings"
	log   *slog.Logger
}

func newCached(cache Invalidator, what string, cfg Config) cached {
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return cached{cache: cache, what: what, log: cfg.Logger}
}

// invalidate drops the cached copy after a committed write. The write
// stands either way; a failed invalidation is logged (and counted by the
// cache) because readers may see the old copy until the key expires.
func (c cached) invalidate(ctx context.Context) {
	if err := c.cache.Invalidate(context.WithoutCancel(ctx)); err != nil {
		c.log.ErrorContext(ctx, c.what+" changed but the cache could not be invalidated; readers may see the old copy until it expires",
			"err", err)
	}
}
