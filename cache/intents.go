package cache

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/service"
)

// IntentLoader reads the intent tree from the source of truth; cmd passes
// the Postgres store.
type IntentLoader interface {
	IntentTree(ctx context.Context) ([]*service.IntentNode, error)
}

// Intents caches the whole intent tree under {prefix}intent:tree as JSON for
// AdminTTL, falling back to the loader when Redis fails.
type Intents struct {
	c *jsonCache
}

// NewIntents returns the intent-tree cache on rdb.
func NewIntents(rdb redis.UniversalClient, prefix string, loader IntentLoader, cfg Config) *Intents {
	return &Intents{c: newJSONCache(rdb, "intent_tree", prefix+"intent:tree", listLoader(loader.IntentTree), cfg)}
}

// IntentTree returns the roots of the tree with their children and every
// node's path, disabled nodes included (callers that route questions skip
// them). Each call returns its own copy.
func (i *Intents) IntentTree(ctx context.Context) ([]*service.IntentNode, error) {
	return decodeList[*service.IntentNode](i.c.get(ctx))
}

// Invalidate drops the cached tree; the admin use case calls it after each
// committed write.
func (i *Intents) Invalidate(ctx context.Context) error { return i.c.invalidate(ctx) }
