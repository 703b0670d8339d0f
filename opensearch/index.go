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

// EnsureIndex creates the first physical index behind the alias when the
// alias does not exist yet. Two instances starting at once may both create
// one; the loser's index is deleted again.
func (c *Client) EnsureIndex(ctx context.Context) error {
	err := c.do(ctx, http.MethodHead, "/_alias/"+c.Alias(), nil, nil)
	if err == nil || !isStatus(err, http.StatusNotFound) {
		return err
	}
	name, err := c.CreateIndex(ctx)
	if err != nil {
		return err
	}
	actions := []any{map[string]any{"add": map[string]any{"index": name, "alias": c.Alias(), "is_write_index": true}}}
	if err := c.do(ctx, http.MethodPost, "/_aliases", map[string]any{"actions": actions}, nil); err != nil {
		return err
	}
	// Another instance may have added the alias to its own index
	// meanwhile: keep the oldest, drop the rest.
	indexes, err := c.aliasIndexes(ctx, c.Alias())
	if err != nil {
		return err
	}
	for _, ix := range indexes[1:] {
		if err := c.DeleteIndex(ctx, ix); err != nil {
			return err
		}
	}
	return nil
}

// CreateIndex creates a new, empty physical index and returns its name.
func (c *Client) CreateIndex(ctx context.Context) (string, error) {
	name := fmt.Sprintf("%s_v%d", c.Alias(), time.Now().UnixNano())
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

// writeAliases are the aliases a change must reach: the live one and,
// during a rebuild, the next one.
func (c *Client) writeAliases(ctx context.Context) ([]string, error) {
	next, err := c.aliasIndexes(ctx, c.nextAlias())
	if err != nil {
		return nil, err
	}
	if len(next) > 0 {
		return []string{c.Alias(), c.nextAlias()}, nil
	}
	return []string{c.Alias()}, nil
}

// Index writes chunks to the live index and, during a rebuild, to the
// next one, in one bulk request; they are searchable when it returns.
// Writing a chunk again overwrites it (its _id is the chunk id).
func (c *Client) Index(ctx context.Context, docs []service.SearchDoc) error {
	if len(docs) == 0 {
		return nil
	}
	aliases, err := c.writeAliases(ctx)
	if err != nil {
		return err
	}
	if err := c.ensureVectorFields(ctx, aliases, docs); err != nil {
		return err
	}
	return c.bulk(ctx, aliases, docs, "/_bulk?require_alias=true&refresh=wait_for")
}

// vectorField names the knn_vector field of an embedding space (its key
// is 16 hex digits).
func vectorField(space string) string { return "vec_" + space }

// ensureVectorFields adds the knn_vector fields of docs' spaces to the
// mappings of targets (a no-op for fields already there).
func (c *Client) ensureVectorFields(ctx context.Context, targets []string, docs []service.SearchDoc) error {
	if !c.cfg.Vectors {
		return nil
	}
	fields := map[string]any{}
	for _, d := range docs {
		if d.Space == "" || len(d.Vector) == 0 {
			continue
		}
		fields[vectorField(d.Space)] = map[string]any{"type": "knn_vector", "dimension": len(d.Vector),
			"method": map[string]any{"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil",
				"parameters": map[string]any{"m": 16, "ef_construction": 64}}}
	}
	if len(fields) == 0 {
		return nil
	}
	return c.do(ctx, http.MethodPut, "/"+strings.Join(targets, ",")+"/_mapping", map[string]any{"properties": fields}, nil)
}

// bulk indexes docs into every target by a request to path.
func (c *Client) bulk(ctx context.Context, aliases []string, docs []service.SearchDoc, path string) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, alias := range aliases {
		for _, d := range docs {
			meta := map[string]any{"index": map[string]any{"_index": alias, "_id": strconv.FormatInt(int64(d.ChunkID), 10)}}
			if err := enc.Encode(meta); err != nil {
				return err
			}
			src := map[string]any{fieldChunk: d.ChunkID, fieldDocument: d.DocumentID, fieldKB: d.KnowledgeBaseID,
				fieldGeneration: d.Generation, fieldTerms: strings.Join(d.Terms, " ")}
			if c.cfg.Vectors && d.Space != "" && len(d.Vector) > 0 {
				src[vectorField(d.Space)] = d.Vector
			}
			if err := enc.Encode(src); err != nil {
				return err
			}
		}
	}
	return c.bulkRequest(ctx, path, buf.Bytes())
}

// bulkRequest sends an NDJSON bulk body and fails unless every item
// succeeded (a delete of a document already gone counts as success).
func (c *Client) bulkRequest(ctx context.Context, path string, body []byte) error {
	var out struct {
		Errors bool `json:"errors"`
		Items  []map[string]struct {
			Status int             `json:"status"`
			Error  json.RawMessage `json:"error"`
		} `json:"items"`
	}
	if err := c.do(ctx, http.MethodPost, path, body, &out); err != nil {
		return err
	}
	if !out.Errors {
		return nil
	}
	for _, item := range out.Items {
		for op, r := range item {
			if r.Status/100 != 2 && (op != "delete" || r.Status != http.StatusNotFound) {
				// Retrying the whole request is idempotent; a rejected item
				// (a full queue, an alias swapped away) says retry.
				return fmt.Errorf("%w: bulk %s %d: %s", service.ErrSearchUnavailable, op, r.Status, r.Error)
			}
		}
	}
	return nil
}

// DeleteDocument removes document docID's chunks except those in keep
// from the live and the next index: a deleted document (keep empty) or
// the chunks of a replaced generation. The removal is searchable when it
// returns.
func (c *Client) DeleteDocument(ctx context.Context, docID service.ID, keep []service.ID) error {
	aliases, err := c.writeAliases(ctx)
	if err != nil {
		return err
	}
	query := map[string]any{"bool": map[string]any{
		"filter":   []any{map[string]any{"term": map[string]any{fieldDocument: docID}}},
		"must_not": []any{map[string]any{"ids": map[string]any{"values": idStrings(keep)}}},
	}}
	return c.deleteMatching(ctx, strings.Join(aliases, ","), query)
}

// DeleteChunks removes chunks by id from one physical index.
func (c *Client) DeleteChunks(ctx context.Context, index string, ids []service.ID) error {
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
		if err := c.bulkRequest(ctx, "/_bulk?refresh=wait_for", buf.Bytes()); err != nil {
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
