package cache

import (
	"context"
	"encoding/json"

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
	load := func(ctx context.Context) (any, error) {
		tree, err := loader.IntentTree(ctx)
		if tree == nil && err == nil {
			tree = []*service.IntentNode{} // an empty tree is cached too
		}
		return tree, err
	}
	return &Intents{c: newJSONCache(rdb, "intent_tree", prefix+"intent:tree", load, cfg)}
}

// IntentTree returns the roots of the tree with their children and every
// node's path, disabled nodes included (callers that route questions skip
// them). Each call returns its own copy.
func (i *Intents) IntentTree(ctx context.Context) ([]*service.IntentNode, error) {
	b, err := i.c.get(ctx)
	if err != nil {
		return nil, err
	}
	tree := []*service.IntentNode{}
	if err := json.Unmarshal(b, &tree); err != nil {
		return nil, err
	}
	return tree, nil
}

// Invalidate drops the cached tree; the admin use case calls it after each
// committed write.
func (i *Intents) Invalidate(ctx context.Context) error { return i.c.invalidate(ctx) }
