package cache

import (
	"context"
	"encoding/json"

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
	load := func(ctx context.Context) (any, error) {
		ms, err := loader.TermMappings(ctx)
		if ms == nil && err == nil {
			ms = []service.TermMapping{} // an empty list is cached too
		}
		return ms, err
	}
	return &Terms{c: newJSONCache(rdb, "term_mappings", prefix+"query-term:mappings", load, cfg)}
}

// TermMappings returns every mapping, enabled or not (service.ApplyTermMappings
// skips disabled ones), highest priority first. Each call returns its own copy.
func (t *Terms) TermMappings(ctx context.Context) ([]service.TermMapping, error) {
	b, err := t.c.get(ctx)
	if err != nil {
		return nil, err
	}
	ms := []service.TermMapping{}
	if err := json.Unmarshal(b, &ms); err != nil {
		return nil, err
	}
	return ms, nil
}

// Invalidate drops the cached mappings; the admin use case calls it after
// each committed write.
func (t *Terms) Invalidate(ctx context.Context) error { return t.c.invalidate(ctx) }
