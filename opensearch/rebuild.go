package opensearch

import (
	"context"
	"net/http"
	"strconv"

	"github.com/ragent-go/ragent/service"
)

// BeginRebuild creates the physical index a rebuild fills and points the
// next alias at it, so changes from then on reach it as well as the live
// index. The index of an earlier rebuild that never finished is dropped.
func (c *Client) BeginRebuild(ctx context.Context) (string, error) {
	stale, err := c.aliasIndexes(ctx, c.nextAlias())
	if err != nil {
		return "", err
	}
	for _, ix := range stale {
		if err := c.DeleteIndex(ctx, ix); err != nil {
			return "", err
		}
	}
	name, err := c.CreateIndex(ctx)
	if err != nil {
		return "", err
	}
	actions := []any{map[string]any{"add": map[string]any{"index": name, "alias": c.nextAlias()}}}
	return name, c.do(ctx, http.MethodPost, "/_aliases", map[string]any{"actions": actions}, nil)
}

// Backfill writes chunks into the physical index being rebuilt, without
// waiting for them to be searchable (FinishRebuild refreshes once).
func (c *Client) Backfill(ctx context.Context, index string, docs []service.SearchDoc) error {
	items := c.indexItems(docs)
	if len(items) == 0 {
		return nil
	}
	batch := make([]entry, len(items))
	for i, it := range items {
		batch[i] = entry{call: &call{}, item: it}
	}
	if err := c.ensureVectorFields(ctx, []string{index}, batch); err != nil {
		return err
	}
	body, _, err := encodeBulk([]string{index}, batch)
	if err != nil {
		return err
	}
	return c.bulkAll(ctx, "/_bulk", body, len(batch))
}

// Refresh makes everything written to index searchable.
func (c *Client) Refresh(ctx context.Context, index string) error {
	return c.do(ctx, http.MethodPost, "/"+index+"/_refresh", nil, nil)
}

// ChunkIDs returns up to size chunk ids in index above after, in order:
// the rebuild's sweep for chunks Postgres no longer has.
func (c *Client) ChunkIDs(ctx context.Context, index string, after service.ID, size int) ([]service.ID, error) {
	body := map[string]any{
		"size":             size,
		"_source":          false,
		"track_total_hits": false,
		"query":            map[string]any{"range": map[string]any{fieldChunk: map[string]any{"gt": after}}},
		"sort":             []any{map[string]any{fieldChunk: "asc"}},
	}
	var out struct {
		Hits struct {
			Hits []struct {
				ID string `json:"_id"`
			} `json:"hits"`
		} `json:"hits"`
	}
	if err := c.do(ctx, http.MethodPost, "/"+index+"/_search", body, &out); err != nil {
		return nil, err
	}
	ids := make([]service.ID, 0, len(out.Hits.Hits))
	for _, h := range out.Hits.Hits {
		v, err := strconv.ParseInt(h.ID, 10, 64)
		if err != nil {
			continue
		}
		ids = append(ids, service.ID(v))
	}
	return ids, nil
}

// FinishRebuild refreshes the rebuilt index, moves the live alias to it
// and drops the next alias in one atomic alias change, then deletes the
// indexes that were live: searches switch from the old index to the new
// one with no moment in between.
func (c *Client) FinishRebuild(ctx context.Context, index string) error {
	if err := c.Refresh(ctx, index); err != nil {
		return err
	}
	old, err := c.aliasIndexes(ctx, c.Alias())
	if err != nil {
		return err
	}
	actions := []any{
		map[string]any{"add": map[string]any{"index": index, "alias": c.Alias(), "is_write_index": true}},
		map[string]any{"remove": map[string]any{"index": index, "alias": c.nextAlias()}},
	}
	for _, ix := range old {
		actions = append(actions, map[string]any{"remove": map[string]any{"index": ix, "alias": c.Alias()}})
	}
	if err := c.do(ctx, http.MethodPost, "/_aliases", map[string]any{"actions": actions}, nil); err != nil {
		return err
	}
	for _, ix := range old {
		if err := c.DeleteIndex(ctx, ix); err != nil {
			return err
		}
	}
	return nil
}
