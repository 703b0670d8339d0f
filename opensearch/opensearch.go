// Package opensearch is the OpenSearch adapter: ragent's keyword search
// runs in an OpenSearch index when RAGENT_SEARCH_BACKEND=opensearch, while
// Postgres stays the source of truth for documents and chunks.
//
// The index holds one document per chunk (its _id is the chunk id) with the
// chunk's knowledge base, document and generation as keyword fields and its
// terms as the BM25 field. The terms are ragent's own tokens (text.Tokenize:
// CJK bigrams, lower-cased, stop words dropped, Porter-stemmed English),
// joined by spaces and indexed with a whitespace analyzer, so the engine
// scores exactly the terms Postgres scores; the similarity is BM25 with
// ragent's k1 and b, set per index. Queries are term queries, one per
// distinct query term boosted by its count, with the knowledge-base ids as
// a terms filter inside the query. With Config.Vectors the vectors are
// kept as well, one knn_vector field per embedding space ("vec_<space
// key>", added to the mapping when a space first appears), searched by the
// k-NN plugin's Lucene engine with the same filter.
//
// Reads go through the alias named by the index prefix; writes go through
// the alias and, while ragent reindex-search rebuilds, the "<prefix>_next"
// alias of the index being built, both with require_alias so a write never
// recreates a dropped index. Concurrent callers' chunk writes share bulk
// requests of bounded size (bulk.go), which do not wait for a refresh
// unless a caller asks (IndexSearchable). Only net/http and encoding/json
// are used: the few REST calls ragent makes do not justify a client
// library.
//
// A connection failure or a 5xx answer wraps service.ErrSearchUnavailable,
// so a search fails with 503 rather than finding nothing.
package opensearch

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Config locates the cluster and shapes the index.
type Config struct {
	// URL is the cluster's base URL; user:password@ in it is sent as basic
	// auth.
	URL string
	// Index is the alias searches read ("ragent"); physical indexes are
	// named "<Index>_v<unix nanoseconds>".
	Index string
	// K1 and B are BM25's parameters, set on each new index; 0 takes
	// ragent's defaults (0.9, 0.4).
	K1, B float64
	// Shards and Replicas of a new index; 0 shards means 1. One shard keeps
	// document frequencies exact (BM25 statistics are per shard).
	Shards, Replicas int
	// Vectors keeps the chunks' vectors too, one knn_vector field (k-NN
	// plugin, Lucene engine, cosine) per embedding space, for VectorSearch.
	Vectors bool
	// Conns is the connections kept open to the cluster, sized to the
	// goroutines that call it at once (ingestion and search-index workers,
	// searches); 0 means 16. Go's default transport keeps 2, so a busier
	// client would open and close connections all the time.
	Conns int
	// MaxBulkBytes and MaxBulkItems cap one bulk request; 0 takes
	// DefaultMaxBulkBytes and DefaultMaxBulkItems.
	MaxBulkBytes, MaxBulkItems int
	// Client sends the requests; nil uses one with a 30 s timeout and a
	// pool of Conns connections.
	Client *http.Client
}

// Client speaks OpenSearch's REST API.
type Client struct {
	base       string
	user, pass string
	cfg        Config
	http       *http.Client
	bulk       *batcher
}

// New returns a client; it does not connect.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("opensearch url %q: must be http(s)://host:port", cfg.URL)
	}
	if cfg.Index == "" || strings.ToLower(cfg.Index) != cfg.Index || strings.ContainsAny(cfg.Index, `*?"<>|/\, #:`) {
		return nil, fmt.Errorf("opensearch index %q: must be a non-empty lower-case name without wildcards, spaces or separators", cfg.Index)
	}
	c := &Client{cfg: cfg, http: cfg.Client}
	if u.User != nil {
		c.user = u.User.Username()
		c.pass, _ = u.User.Password()
		u.User = nil
	}
	c.base = u.String()
	if c.http == nil {
		conns := cmp.Or(max(cfg.Conns, 0), 16)
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.MaxIdleConns, t.MaxIdleConnsPerHost, t.IdleConnTimeout = conns, conns, 90*time.Second
		c.http = &http.Client{Timeout: 30 * time.Second, Transport: t}
	}
	c.bulk = &batcher{c: c, maxBytes: cmp.Or(max(cfg.MaxBulkBytes, 0), DefaultMaxBulkBytes),
		maxItems: cmp.Or(max(cfg.MaxBulkItems, 0), DefaultMaxBulkItems)}
	if c.cfg.K1 == 0 {
		c.cfg.K1 = 0.9
	}
	if c.cfg.B == 0 {
		c.cfg.B = 0.4
	}
	if c.cfg.Shards == 0 {
		c.cfg.Shards = 1
	}
	return c, nil
}

// Vectors reports whether the index holds the chunks' vectors.
func (c *Client) Vectors() bool { return c.cfg.Vectors }

// Alias is the name searches read.
func (c *Client) Alias() string { return c.cfg.Index }

// nextAlias names the index a rebuild fills.
func (c *Client) nextAlias() string { return c.cfg.Index + "_next" }

// Ping checks that the cluster answers and the search alias exists:
// /readyz's check.
func (c *Client) Ping(ctx context.Context) error {
	return c.do(ctx, http.MethodHead, "/"+c.Alias(), nil, nil)
}

// statusError is an answer other than 2xx.
type statusError struct {
	status int
	body   string
}

func (e *statusError) Error() string { return fmt.Sprintf("opensearch: %d: %s", e.status, e.body) }

func isStatus(err error, status int) bool {
	var se *statusError
	return errors.As(err, &se) && se.status == status
}

// do sends one request with a JSON (or NDJSON, for a []byte) body and
// decodes a JSON answer into out when out is not nil.
func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	ctype := "application/json"
	switch b := body.(type) {
	case nil:
	case []byte:
		rd, ctype = bytes.NewReader(b), "application/x-ndjson"
	default:
		data, err := json.Marshal(b)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return err
	}
	if rd != nil {
		req.Header.Set("Content-Type", ctype)
	}
	if c.user != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: %s %s: %v", service.ErrSearchUnavailable, method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 2048))
		se := &statusError{status: resp.StatusCode, body: strings.TrimSpace(string(msg))}
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return fmt.Errorf("%w: %s %s: %w", service.ErrSearchUnavailable, method, path, se)
		}
		return fmt.Errorf("%s %s: %w", method, path, se)
	}
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("%w: %s %s: decode answer: %v", service.ErrSearchUnavailable, method, path, err)
	}
	return nil
}
