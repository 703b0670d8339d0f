package llm

import (
	"context"
	"fmt"
	"time"

	lcbedrock "github.com/tmc/langchaingo/embeddings/bedrock"
	"github.com/tmc/langchaingo/llms/googleai"

	"github.com/ragent-go/ragent/service"
)

// langchainEmbedder adapts langchaingo's Gemini and Bedrock embedders to
// service.Embedder with ragent's retry policy (the status and Retry-After
// come from callTransport), a per-call timeout and the dimension check.
// Bedrock's Cohere models embed queries and documents differently
// (input_type search_query / search_document), so the EmbedKind picks
// langchaingo's EmbedQuery or EmbedDocuments; Gemini's batch API has one
// kind for both.
type langchainEmbedder struct {
	// dims applies the own client's dimension rule (adopt the first
	// dimension when none is configured, refuse any other); only its
	// model and dimension fields are set.
	dims    *remoteEmbedder
	model   string
	batch   int
	timeout time.Duration
	retry   retrier
	docs    func(ctx context.Context, texts []string) ([][]float32, error)
	query   func(ctx context.Context, text string) ([]float32, error) // nil: docs serves queries too
}

func newLangchainEmbedder(cfg Config) (service.Embedder, error) {
	ep := Endpoint{Name: "embedding", Provider: cfg.EmbeddingProvider, BaseURL: cfg.EmbeddingBaseURL, APIKey: cfg.EmbeddingAPIKey, Region: cfg.Region}
	o := buildOptions(cfg)
	e := &langchainEmbedder{
		dims:  &remoteEmbedder{model: cfg.EmbeddingModel, fixedDim: cfg.EmbeddingDim > 0},
		model: cfg.EmbeddingModel, batch: cfg.EmbeddingBatchSize,
		timeout: cfg.RequestTimeout, retry: newRetrier(cfg.MaxRetries, o),
	}
	e.dims.dim.Store(int64(cfg.EmbeddingDim))
	switch cfg.EmbeddingProvider {
	case ProviderGoogleAI:
		g, err := newGoogleAI(ep, googleai.WithDefaultEmbeddingModel(cfg.EmbeddingModel), o.client, o.now)
		if err != nil {
			return nil, err
		}
		e.docs = g.CreateEmbedding
	case ProviderBedrock:
		if ep.Region == "" {
			return nil, service.Errorf(service.ErrInvalid, "llm: the bedrock embedder needs a region (RAGENT_LLM_REGION)")
		}
		rc, err := newBedrockClient(ep, newCallClient(o.client, nil, o.now))
		if err != nil {
			return nil, err
		}
		b, err := lcbedrock.NewBedrock(lcbedrock.WithClient(rc), lcbedrock.WithModel(cfg.EmbeddingModel), lcbedrock.WithBatchSize(cfg.EmbeddingBatchSize))
		if err != nil {
			return nil, err
		}
		e.docs, e.query = b.EmbedDocuments, b.EmbedQuery
	default:
		return nil, service.Errorf(service.ErrInvalid, "llm: unknown embedding provider %q", cfg.EmbeddingProvider)
	}
	return e, nil
}

// Model implements service.Embedder.
func (e *langchainEmbedder) Model() string { return e.model }

// Dim implements service.Embedder: the configured dimension, or the first
// one seen.
func (e *langchainEmbedder) Dim() int { return e.dims.Dim() }

// Embed implements service.Embedder with the contract of the own client's
// embedder: vectors in the order of texts, failures after retries wrap
// service.ErrUnavailable, a cancelled ctx returns ctx.Err().
func (e *langchainEmbedder) Embed(ctx context.Context, kind service.EmbedKind, texts []string) ([][]float32, error) {
	out := make([][]float32, 0, len(texts))
	for start := 0; start < len(texts); start += e.batch {
		batch := texts[start:min(start+e.batch, len(texts))]
		var vecs [][]float32
		err := e.retry.do(ctx, func() (bool, error) {
			var err error
			vecs, err = e.call(ctx, kind, batch)
			return true, err
		})
		if err == nil && len(vecs) != len(batch) {
			err = fmt.Errorf("embedding response has %d vectors for %d inputs", len(vecs), len(batch))
		}
		for _, v := range vecs {
			if err != nil {
				break
			}
			err = e.dims.checkDim(len(v))
		}
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			return nil, fmt.Errorf("%w: embedding model %s: %w", service.ErrUnavailable, e.model, err)
		}
		out = append(out, vecs...)
	}
	return out, nil
}

// call makes one attempt at a batch.
func (e *langchainEmbedder) call(ctx context.Context, kind service.EmbedKind, batch []string) ([][]float32, error) {
	cctx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()
	rec := &callRecord{}
	cctx = context.WithValue(cctx, callKey{}, rec)
	var vecs [][]float32
	var err error
	if kind == service.EmbedQuery && e.query != nil {
		for _, t := range batch {
			var v []float32
			if v, err = e.query(cctx, t); err != nil {
				break
			}
			vecs = append(vecs, v)
		}
	} else {
		vecs, err = e.docs(cctx, batch)
	}
	switch {
	case err == nil:
		return vecs, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	}
	status, conn := rec.get()
	switch {
	case status != nil:
		return nil, status
	case conn != nil || cctx.Err() != nil:
		return nil, &connError{err}
	}
	return nil, err
}
