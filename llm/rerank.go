package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// Reranker scores documents against a query with a cross-encoder served
// behind a /rerank endpoint in the shape Jina, Cohere, vLLM and
// DashScope's compatible mode share: {model, query, documents, top_n} in,
// {results: [{index, relevance_score}]} out.
type Reranker struct {
	url     string
	apiKey  string
	model   string
	http    *http.Client
	retry   retrier
	timeout time.Duration
	// budget, when set, admits every call (Config.RerankBudget); maxWait
	// bounds how long its 429s keep a call waiting.
	budget  Budget
	maxWait time.Duration
	now     func() time.Time
}

// NewReranker returns a Reranker posting to baseURL + "/rerank" (a baseURL
// that already ends in /rerank is used as is). It retries like the other
// providers; cfg gives the HTTP client, the backoff, MaxRetries,
// RequestTimeout and the budget (RerankBudget, BudgetWait): with one, a
// 429 is not backed off from but absorbed in the budget's queue.
func NewReranker(baseURL, apiKey, model string, cfg Config) *Reranker {
	cfg = cfg.withDefaults()
	o := buildOptions(cfg)
	url := strings.TrimRight(baseURL, "/")
	if !strings.HasSuffix(url, "/rerank") {
		url += "/rerank"
	}
	return &Reranker{
		url:     url,
		apiKey:  apiKey,
		model:   model,
		http:    o.client,
		retry:   newRetrier(cfg.MaxRetries, o),
		timeout: cfg.RequestTimeout,
		budget:  cfg.RerankBudget,
		maxWait: cfg.BudgetWait,
		now:     cfg.Now,
	}
}

type rerankRequest struct {
	Model           string   `json:"model"`
	Query           string   `json:"query"`
	Documents       []string `json:"documents"`
	TopN            int      `json:"top_n"`
	ReturnDocuments bool     `json:"return_documents"`
}

type rerankResponse struct {
	Results []struct {
		Index          int     `json:"index"`
		RelevanceScore float64 `json:"relevance_score"`
	} `json:"results"`
}

// Rerank returns one relevance score per document, in the order of docs
// (higher is more relevant; the scale is the model's). A document the
// service left out of its answer scores -Inf so it sorts last. Failures
// wrap service.ErrUnavailable; a cancelled ctx returns ctx.Err().
func (r *Reranker) Rerank(ctx context.Context, query string, docs []string) ([]float64, error) {
	if len(docs) == 0 {
		return nil, nil
	}
	body, err := json.Marshal(rerankRequest{Model: r.model, Query: query, Documents: docs, TopN: len(docs)})
	if err != nil {
		return nil, err
	}
	var res rerankResponse
	once := func() (bool, error) {
		res = rerankResponse{}
		return true, r.call(ctx, body, &res)
	}
	attempt := once
	if r.budget != nil {
		attempt = reservedAttempt(ctx, r.budget, RerankTokens(query, docs), r.maxWait, r.now, once)
	}
	err = r.retry.do(ctx, attempt)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, fmt.Errorf("%w: rerank model %s: %w", service.ErrUnavailable, r.model, err)
	}
	scores := make([]float64, len(docs))
	for i := range scores {
		scores[i] = math.Inf(-1)
	}
	for _, x := range res.Results {
		if x.Index < 0 || x.Index >= len(docs) {
			return nil, fmt.Errorf("%w: rerank model %s: result index %d out of %d documents", service.ErrUnavailable, r.model, x.Index, len(docs))
		}
		scores[x.Index] = x.RelevanceScore
	}
	return scores, nil
}

func (r *Reranker) call(ctx context.Context, body []byte, res *rerankResponse) error {
	cctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	resp, err := postJSON(cctx, r.http, r.url, r.apiKey, body)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &connError{err}
	}
	if resp.StatusCode != http.StatusOK {
		return readStatusError(resp, r.retry.now())
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(res); err != nil {
		return decodeError(ctx, err)
	}
	return nil
}

// RerankTokens estimates a rerank call's tokens, as its budget and its
// usage count them: the query once per document, and the documents.
func RerankTokens(query string, docs []string) int {
	q, n := text.CountTokens(query), 0
	for _, d := range docs {
		n += q + text.CountTokens(d)
	}
	return n
}
