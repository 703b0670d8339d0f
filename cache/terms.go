package cache

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/service"
)

// TermLoader reads every term mapping from the source of truth; cmd passes
// the Postgres store.
type TermLoader interface {
	TermMappings(ctx context.Context) ([]service.TermMapping, error)
}

// Terms caches every term mapping under {prefix}query-term:mappings as JSON
// for AdminTTL, falling back to the loader when Redis fails.
type Terms struct {
	c *jsonCache
}

// NewTerms returns the term-mapping cache on rdb.
func NewTerms(rdb redis.UniversalClient, prefix string, loader TermLoader, cfg Config) *Terms {
	return &Terms{c: newJSONCache(rdb, "term_mappings", prefix+"query-term:mappings", listLoader(loader.TermMappings), cfg)}
}

// TermMappings returns every mapping, enabled or not (service.ApplyTermMappings
// skips disabled ones), highest priority first. Each call returns its own copy.
func (t *Terms) TermMappings(ctx context.Context) ([]service.TermMapping, error) {
	return decodeList[service.TermMapping](t.c.get(ctx))
}

// Invalidate drops the cached mappings; the admin use case calls it after
// each committed write.
func (t *Terms) Invalidate(ctx context.Context) error { return t.c.invalidate(ctx) }
