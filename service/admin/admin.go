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
	"errors"
	"log/slog"
	"unicode/utf8"

	"github.com/ragent-go/ragent/service"
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

// requireText refuses an empty s or one longer than max runes, naming field.
func requireText(field, s string, max int) error {
	if s == "" {
		return service.Errorf(service.ErrInvalid, "%s is required", field)
	}
	return limitText(field, s, max)
}

// limitText refuses s when it is longer than max runes, naming field.
func limitText(field, s string, max int) error {
	if utf8.RuneCountInString(s) > max {
		return service.Errorf(service.ErrInvalid, "%s must be at most %d characters", field, max)
	}
	return nil
}

// checkNamed checks the name and description that groups and knowledge
// bases carry.
func checkNamed(name, description string) error {
	if err := requireText("name", name, service.MaxNameRunes); err != nil {
		return err
	}
	return limitText("description", description, service.MaxDescriptionRunes)
}

// byIDOrName finds what a member input names: by id when it has one, else
// by name (which the caller has checked is not empty). An unknown one is
// invalid input (naming what), not a missing resource: the route exists.
func byIDOrName[T any](ctx context.Context, id service.ID, name, what string,
	byID func(context.Context, service.ID) (T, error), byName func(context.Context, string) (T, error)) (T, error) {
	var v T
	var err error
	if id != 0 {
		v, err = byID(ctx, id)
	} else {
		v, err = byName(ctx, name)
	}
	if errors.Is(err, service.ErrNotFound) {
		var zero T
		return zero, service.Errorf(service.ErrInvalid, "no such %s", what)
	}
	return v, err
}
