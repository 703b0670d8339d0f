package ingest

import (
	"context"
	"log/slog"

	"github.com/ragent-go/ragent/service"
)

// RebuildStore is what a search-index rebuild reads from the source of
// truth.
type RebuildStore interface {
	// WithStartupLock runs fn under the lock instances start under.
	WithStartupLock(ctx context.Context, fn func(ctx context.Context) error) error
	// WithSearchRebuildLock runs fn while no ingestion is between its
	// write to the engine and its commit (ReplaceIndexedChunks).
	WithSearchRebuildLock(ctx context.Context, fn func(ctx context.Context) error) error
	// ChunksAfter is up to limit chunks with ids above after, in id order.
	ChunksAfter(ctx context.Context, after service.ID, limit int) ([]service.Chunk, error)
	// ExistingChunks says which of ids the store still has.
	ExistingChunks(ctx context.Context, ids []service.ID) (map[service.ID]bool, error)
}

// RebuildIndex is an external search engine whose index can be rebuilt
// behind an alias with no downtime.
type RebuildIndex interface {
	// EnsureIndex creates the live index behind the alias if there is none.
	EnsureIndex(ctx context.Context) error
	// BeginRebuild creates a new physical index that takes every change
	// from now on and returns its name.
	BeginRebuild(ctx context.Context) (string, error)
	Backfill(ctx context.Context, index string, docs []service.SearchDoc) error
	Refresh(ctx context.Context, index string) error
	// ChunkIDs is up to size chunk ids of index above after, in order.
	ChunkIDs(ctx context.Context, index string, after service.ID, size int) ([]service.ID, error)
	SweepChunks(ctx context.Context, index string, ids []service.ID) error
	// FinishRebuild swaps the alias to index.
	FinishRebuild(ctx context.Context, index string) error
	Alias() string
}

// rebuildBatch is the chunks per backfill bulk request.
const rebuildBatch = 500

// RebuildSearchIndex rebuilds the external search index from the store with
// no downtime (ragent reindex-search): a new physical index takes every
// change from the moment it exists, is backfilled with every chunk, swept
// of the chunks deleted while it was backfilled, and replaces the live
// index in one alias swap. It returns the number of chunks backfilled.
func RebuildSearchIndex(ctx context.Context, store RebuildStore, idx RebuildIndex, log *slog.Logger) (int, error) {
	if err := store.WithStartupLock(ctx, idx.EnsureIndex); err != nil {
		return 0, err
	}
	// Under the rebuild lock no ingestion is between its write to the
	// engine and its commit: every change committed from now on reaches the
	// new index (an ingestion's own write or the search-index consumer's,
	// both through the next alias); everything committed before is read
	// below, from the store.
	var index string
	err := store.WithSearchRebuildLock(ctx, func(ctx context.Context) error {
		var err error
		index, err = idx.BeginRebuild(ctx)
		return err
	})
	if err != nil {
		return 0, err
	}
	total, err := backfill(ctx, store, idx, index)
	if err != nil {
		return total, err
	}
	// A chunk read above may have been deleted before its batch was
	// written, after its consumer removed it from this index: sweep the
	// new index for chunks the store no longer has.
	if err := idx.Refresh(ctx, index); err != nil {
		return total, err
	}
	swept, err := sweep(ctx, store, idx, index)
	if err != nil {
		return total, err
	}
	if err := idx.FinishRebuild(ctx, index); err != nil {
		return total, err
	}
	log.InfoContext(ctx, "rebuilt the search index", "index", index, "alias", idx.Alias(), "chunks", total, "swept", swept)
	return total, nil
}

// backfill writes every chunk of the store into index.
func backfill(ctx context.Context, store RebuildStore, idx RebuildIndex, index string) (int, error) {
	total := 0
	var after service.ID
	for {
		chunks, err := store.ChunksAfter(ctx, after, rebuildBatch)
		if err != nil || len(chunks) == 0 {
			return total, err
		}
		if err := idx.Backfill(ctx, index, SearchDocs(chunks)); err != nil {
			return total, err
		}
		total += len(chunks)
		after = chunks[len(chunks)-1].ID
	}
}

// sweep removes from index the chunks the store no longer has.
func sweep(ctx context.Context, store RebuildStore, idx RebuildIndex, index string) (int, error) {
	swept := 0
	var after service.ID
	for {
		ids, err := idx.ChunkIDs(ctx, index, after, rebuildBatch)
		if err != nil || len(ids) == 0 {
			return swept, err
		}
		live, err := store.ExistingChunks(ctx, ids)
		if err != nil {
			return swept, err
		}
		var gone []service.ID
		for _, id := range ids {
			if !live[id] {
				gone = append(gone, id)
			}
		}
		if err := idx.SweepChunks(ctx, index, gone); err != nil {
			return swept, err
		}
		swept += len(gone)
		after = ids[len(ids)-1]
	}
}
