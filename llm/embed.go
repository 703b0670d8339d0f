package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/ragent-go/ragent/service"
)

// remoteEmbedder calls an OpenAI-compatible /embeddings endpoint or
// Ollama's /api/embed, in batches and a few calls at a time.
type remoteEmbedder struct {
	provider    string
	url         string
	queryURL    string // where questions go: url unless EmbeddingQueryBaseURL
	apiKey      string
	model       string
	kinds       EmbedKinds
	fixedDim    bool         // the dimension was configured, not learned
	dim         atomic.Int64 // 0 until learned when not configured
	batch       int
	concurrency int
	timeout     time.Duration
	http        *http.Client
	retry       retrier
	gate        Gate          // nil: no limit beyond concurrency
	metrics     *EmbedMetrics // nil counts nothing
}

func newRemoteEmbedder(cfg Config, o options) *remoteEmbedder {
	url := embedURL(cfg.EmbeddingProvider, cfg.EmbeddingBaseURL)
	queryURL := url
	if cfg.EmbeddingQueryBaseURL != "" {
		queryURL = embedURL(cfg.EmbeddingProvider, cfg.EmbeddingQueryBaseURL)
	}
	e := &remoteEmbedder{
		provider:    cfg.EmbeddingProvider,
		url:         url,
		queryURL:    queryURL,
		apiKey:      cfg.EmbeddingAPIKey,
		model:       cfg.EmbeddingModel,
		kinds:       cfg.EmbeddingKinds,
		fixedDim:    cfg.EmbeddingDim > 0,
		batch:       cfg.EmbeddingBatchSize,
		concurrency: cfg.EmbeddingConcurrency,
		timeout:     cfg.RequestTimeout,
		http:        o.client,
		retry:       newRetrier(cfg.MaxRetries, o),
		gate:        o.gate,
		metrics:     cfg.EmbedMetrics,
	}
	if e.kinds.IsZero() {
		e.kinds = DefaultEmbedKinds(e.model)
	}
	e.dim.Store(int64(cfg.EmbeddingDim))
	return e
}

// embedURL is the embeddings endpoint under base for provider.
func embedURL(provider, base string) string {
	base = strings.TrimRight(base, "/")
	if provider == ProviderOllama {
		return ollamaNativeBase(base) + "/api/embed"
	}
	return base + "/embeddings"
}

// Model implements service.Embedder.
func (e *remoteEmbedder) Model() string { return e.model }

// Dim implements service.Embedder. Without a configured dimension it is 0
// until the first successful Embed, which fixes it for the embedder's life.
func (e *remoteEmbedder) Dim() int { return int(e.dim.Load()) }

// Embed implements service.Embedder: texts of kind get its prefix or
// input_type (EmbedKinds). Vectors come back in the order of texts.
// Provider failures, after retries, wrap service.ErrUnavailable, as does a
// vector of the wrong dimension; a cancelled ctx returns ctx.Err(), and a
// gate's refusal (service.ErrBusy) is returned as it is.
func (e *remoteEmbedder) Embed(ctx context.Context, kind service.EmbedKind, texts []string) ([][]float32, error) {
	texts = e.kinds.apply(kind, texts)
	out := make([][]float32, len(texts))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(e.concurrency)
	for start := 0; start < len(texts); start += e.batch {
		end := min(start+e.batch, len(texts))
		g.Go(func() error {
			if err := gctx.Err(); err != nil {
				return err // an earlier batch failed; do not start another
			}
			vecs, err := e.embedBatch(gctx, kind, texts[start:end])
			if err != nil {
				return err
			}
			copy(out[start:end], vecs)
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		if errors.Is(err, service.ErrBusy) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: embedding model %s: %w", service.ErrUnavailable, e.model, err)
	}
	return out, nil
}

type embedRequest struct {
	Model          string   `json:"model"`
	Input          []string `json:"input"`
	EncodingFormat string   `json:"encoding_format,omitempty"`
	InputType      string   `json:"input_type,omitempty"`
}

type openAIEmbedResponse struct {
	Data  []embedItem `json:"data"`
	Usage struct {
		PromptTokens int `json:"prompt_tokens"`
	} `json:"usage"`
}

type embedItem struct {
	Index     int       `json:"index"`
	Embedding []float32 `json:"embedding"`
}

type ollamaEmbedResponse struct {
	Embeddings      [][]float32 `json:"embeddings"`
	PromptEvalCount int         `json:"prompt_eval_count"`
}

func (e *remoteEmbedder) embedBatch(ctx context.Context, kind service.EmbedKind, texts []string) ([][]float32, error) {
	req := embedRequest{Model: e.model, Input: texts}
	if e.provider == ProviderOpenAI {
		req.EncodingFormat = "float"
		req.InputType = e.kinds.inputType(kind)
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	var vecs [][]float32
	err = e.retry.do(ctx, e.attempt(ctx, kind, texts, func() (err error) {
		vecs, err = e.call(ctx, e.endpoint(kind), body, len(texts))
		return err
	}))
	if err != nil {
		return nil, err
	}
	for _, v := range vecs {
		if err := e.checkDim(len(v)); err != nil {
			return nil, err
		}
	}
	return vecs, nil
}

// endpoint is the URL that embeds texts of kind: a server of its own for
// questions keeps them from queueing behind a bulk ingest's batches on a
// model server that computes one call at a time.
func (e *remoteEmbedder) endpoint(kind service.EmbedKind) string {
	if kind == service.EmbedQuery {
		return e.queryURL
	}
	return e.url
}

// call makes one HTTP call to url and decodes n vectors in input order.
func (e *remoteEmbedder) call(ctx context.Context, url string, body []byte, n int) ([][]float32, error) {
	cctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	resp, err := postJSON(cctx, e.http, url, e.apiKey, body)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, &connError{err}
	}
	if resp.StatusCode != http.StatusOK {
		return nil, readStatusError(resp, e.retry.now())
	}
	defer resp.Body.Close()

	var vecs [][]float32
	if e.provider == ProviderOllama {
		var r ollamaEmbedResponse
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return nil, decodeError(ctx, err)
		}
		vecs = r.Embeddings
		e.metrics.addTokens(r.PromptEvalCount)
	} else {
		var r openAIEmbedResponse
		if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
			return nil, decodeError(ctx, err)
		}
		// The spec gives each vector its input index; do not trust the
		// order of the array.
		e.metrics.addTokens(r.Usage.PromptTokens)
		slices.SortFunc(r.Data, func(a, b embedItem) int { return a.Index - b.Index })
		for i, d := range r.Data {
			if d.Index != i {
				return nil, fmt.Errorf("embedding response has index %d at position %d", d.Index, i)
			}
			vecs = append(vecs, d.Embedding)
		}
	}
	if len(vecs) != n {
		return nil, fmt.Errorf("embedding response has %d vectors for %d inputs", len(vecs), n)
	}
	return vecs, nil
}

// decodeError tells a body cut short by the network (worth a retry) from
// a malformed one (not).
func decodeError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &syntaxErr) || errors.As(err, &typeErr) {
		return fmt.Errorf("malformed response: %w", err)
	}
	return &connError{err}
}

// checkDim adopts the first dimension seen when none was configured and
// rejects any other afterwards: one knowledge base's vectors share one
// dimension.
func (e *remoteEmbedder) checkDim(n int) error {
	if n == 0 {
		return fmt.Errorf("embedding model %s returned an empty vector", e.model)
	}
	if e.dim.CompareAndSwap(0, int64(n)) {
		return nil
	}
	if want := int(e.dim.Load()); n != want {
		if e.fixedDim {
			return fmt.Errorf("embedding model %s returned %d dimensions but the configured dimension (RAGENT_EMBEDDING_DIM) is %d", e.model, n, want)
		}
		return fmt.Errorf("embedding model %s returned %d dimensions after returning %d", e.model, n, want)
	}
	return nil
}

// postJSON sends body to url with the bearer key, if any.
func postJSON(ctx context.Context, client *http.Client, url, apiKey string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+apiKey)
	}
	return client.Do(req)
}
