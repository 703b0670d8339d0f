package opensearch

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Field names of a chunk's document in the index.
const (
	fieldChunk      = "chunk_id"
	fieldDocument   = "document_id"
	fieldKB         = "kb_id"
	fieldGeneration = "generation"
	fieldTerms      = "terms"
)

// indexBody is a new physical index: ragent's BM25 on the terms field,
// which a whitespace tokenizer splits back into the terms ragent made.
func (c *Client) indexBody() map[string]any {
	return map[string]any{
		"settings": map[string]any{
			"index": map[string]any{
				"number_of_shards":   c.cfg.Shards,
				"number_of_replicas": c.cfg.Replicas,
				"knn":                c.cfg.Vectors,
				"similarity": map[string]any{
					"ragent_bm25": map[string]any{"type": "BM25", "k1": c.cfg.K1, "b": c.cfg.B},
				},
				"analysis": map[string]any{
					"analyzer": map[string]any{
						"ragent_terms": map[string]any{"type": "custom", "tokenizer": "whitespace"},
					},
				},
			},
		},
		"mappings": map[string]any{
			"dynamic": "strict",
			"properties": map[string]any{
				fieldChunk:      map[string]any{"type": "long"},
				fieldDocument:   map[string]any{"type": "long"},
				fieldKB:         map[string]any{"type": "long"},
				fieldGeneration: map[string]any{"type": "integer"},
				fieldTerms: map[string]any{"type": "text", "analyzer": "ragent_terms", "similarity": "ragent_bm25",
					"index_options": "freqs"},
			},
		},
	}
}

// EnsureIndex creates the first physical index, with the alias on it in
// the same request, when the alias does not exist yet. Instances starting
// at once must call it under one lock (ragent's startup lock): otherwise
// each may create an index and only one can hold the alias.
func (c *Client) EnsureIndex(ctx context.Context) error {
	err := c.do(ctx, http.MethodHead, "/_alias/"+c.Alias(), nil, nil)
	if err == nil || !isStatus(err, http.StatusNotFound) {
		return err
	}
	body := c.indexBody()
	body["aliases"] = map[string]any{c.Alias(): map[string]any{"is_write_index": true}}
	return c.do(ctx, http.MethodPut, "/"+c.indexName(), body, nil)
}

// indexName names a new physical index.
func (c *Client) indexName() string { return fmt.Sprintf("%s_v%d", c.Alias(), time.Now().UnixNano()) }

// CreateIndex creates a new, empty physical index and returns its name.
func (c *Client) CreateIndex(ctx context.Context) (string, error) {
	name := c.indexName()
	return name, c.do(ctx, http.MethodPut, "/"+name, c.indexBody(), nil)
}

// DeleteIndex drops a physical index.
func (c *Client) DeleteIndex(ctx context.Context, name string) error {
	err := c.do(ctx, http.MethodDelete, "/"+name, nil, nil)
	if isStatus(err, http.StatusNotFound) {
		return nil
	}
	return err
}

// aliasIndexes returns the physical indexes behind alias, oldest first
// (their names end in creation time), none when it does not exist.
func (c *Client) aliasIndexes(ctx context.Context, alias string) ([]string, error) {
	var out map[string]json.RawMessage
	err := c.do(ctx, http.MethodGet, "/_alias/"+alias, nil, &out)
	if isStatus(err, http.StatusNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(out))
	for name := range out {
		names = append(names, name)
	}
	// Same prefix, zero-free decimal nanoseconds of one length for
	// centuries: lexical order is creation order.
	slices.Sort(names)
	return names, nil
}

// Index writes chunks to the live index and, during a rebuild, to the
// next one, in bulk requests shared with concurrent callers; it returns
// once OpenSearch has indexed them, and they turn searchable at the index's
// next refresh (refresh_interval, 1 s unless an operator's template sets
// another), without waiting for it. Writing a chunk again overwrites it
// (its _id is the chunk id). A chunk too large for any bulk request is an
// error wrapping service.ErrPermanent.
func (c *Client) Index(ctx context.Context, docs []service.SearchDoc) error {
	return c.bulk.submit(ctx, &call{items: c.indexItems(docs)})
}

// IndexSearchable is Index, returning only once the chunks are searchable
// (the bulk request waits for the refresh): a replacement's new chunks,
// written before the commit that removes the old ones from Postgres.
func (c *Client) IndexSearchable(ctx context.Context, docs []service.SearchDoc) error {
	return c.bulk.submit(ctx, &call{items: c.indexItems(docs), visible: true})
}

// DeleteChunks removes chunks by id from the live and the next index (a
// chunk already gone counts as removed). Unlike DeleteDocument it finds
// them without a search, so it also removes chunks written so recently
// that no refresh has made them searchable yet.
func (c *Client) DeleteChunks(ctx context.Context, ids []service.ID) error {
	items := make([]item, len(ids))
	for i, id := range ids {
		items[i] = item{id: strconv.FormatInt(int64(id), 10)}
	}
	return c.bulk.submit(ctx, &call{items: items})
}

// indexItems encodes chunks as the index's documents.
func (c *Client) indexItems(docs []service.SearchDoc) []item {
	items := make([]item, 0, len(docs))
	for _, d := range docs {
		src := map[string]any{fieldChunk: d.ChunkID, fieldDocument: d.DocumentID, fieldKB: d.KnowledgeBaseID,
			fieldGeneration: d.Generation, fieldTerms: strings.Join(d.Terms, " ")}
		it := item{id: strconv.FormatInt(int64(d.ChunkID), 10)}
		if c.cfg.Vectors && d.Space != "" && len(d.Vector) > 0 {
			it.vecField, it.dim = vectorField(d.Space), len(d.Vector)
			src[it.vecField] = d.Vector
		}
		// A map of numbers, strings and floats always encodes.
		it.src, _ = json.Marshal(src)
		items = append(items, it)
	}
	return items
}

// vectorField names the knn_vector field of an embedding space (its key
// is 16 hex digits).
func vectorField(space string) string { return "vec_" + space }

// DeleteDocument removes document docID's chunks except those in keep
// from the live and the next index: a deleted document (keep empty) or
// the chunks of a replaced generation. The removal is searchable when it
// returns.
func (c *Client) DeleteDocument(ctx context.Context, docID service.ID, keep []service.ID) error {
	query := map[string]any{"bool": map[string]any{
		"filter":   []any{map[string]any{"term": map[string]any{fieldDocument: docID}}},
		"must_not": []any{map[string]any{"ids": map[string]any{"values": idStrings(keep)}}},
	}}
	// The search ignores the next alias when no rebuild runs.
	return c.deleteMatching(ctx, c.Alias()+","+c.nextAlias(), query)
}

// SweepChunks removes chunks by id from one physical index: the rebuild's
// sweep.
func (c *Client) SweepChunks(ctx context.Context, index string, ids []service.ID) error {
	if len(ids) == 0 {
		return nil
	}
	return c.deleteMatching(ctx, index, map[string]any{"ids": map[string]any{"values": idStrings(ids)}})
}

// deleteBatch is the documents found and deleted per round trip.
const deleteBatch = 1000

// deleteMatching deletes what query matches in targets: it finds the
// documents (with their concrete index) and deletes them by bulk request.
// Delete-by-query would do it in one call but lives in the reindex module,
// which a minimal node (scripts/services.sh) does not load.
func (c *Client) deleteMatching(ctx context.Context, targets string, query map[string]any) error {
	for {
		body := map[string]any{"size": deleteBatch, "_source": false, "track_total_hits": false, "query": query}
		var out struct {
			Hits struct {
				Hits []struct {
					Index string `json:"_index"`
					ID    string `json:"_id"`
				} `json:"hits"`
			} `json:"hits"`
		}
		if err := c.do(ctx, http.MethodPost, "/"+targets+"/_search?ignore_unavailable=true", body, &out); err != nil {
			return err
		}
		hits := out.Hits.Hits
		if len(hits) == 0 {
			return nil
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		for _, h := range hits {
			if err := enc.Encode(map[string]any{"delete": map[string]any{"_index": h.Index, "_id": h.ID}}); err != nil {
				return err
			}
		}
		if err := c.bulkAll(ctx, "/_bulk?refresh=wait_for", buf.Bytes(), len(hits)); err != nil {
			return err
		}
		if len(hits) < deleteBatch {
			return nil
		}
	}
}

func idStrings(ids []service.ID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = strconv.FormatInt(int64(id), 10)
	}
	return out
}
