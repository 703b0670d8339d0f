package llm

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tmc/langchaingo/llms"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// langchainChat adapts a langchaingo llms.Model to service.ChatModel and
// adds what langchaingo lacks: a failure keeps its status code and
// Retry-After (recorded by callTransport under the model's HTTP client),
// the first-token and between-token timeouts (a watchdog around the
// streaming callback cancels the call), retries before the first token,
// and the caller's callback error comes back unchanged (googleai swallows
// it).
type langchainChat struct {
	ep    Endpoint
	model string
	t     timeouts
	retry retrier
	llm   llms.Model
}

// callKey finds the callRecord of an attempt in its request's context.
type callKey struct{}

// callRecord is what callTransport saw of one attempt's HTTP exchanges.
type callRecord struct {
	mu     sync.Mutex
	status *statusError
	conn   error
}

func (r *callRecord) get() (*statusError, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status, r.conn
}

// callTransport sits under langchaingo's HTTP calls. It records a non-2xx
// answer's status and Retry-After before langchaingo turns them into a
// string, and transport failures (dial, reset, a body cut short), so the
// retry and failover policy can tell them apart; it also sets the headers
// a provider's SDK cannot (Gemini's key when the SDK is given a client).
type callTransport struct {
	base   http.RoundTripper
	header http.Header
	now    func() time.Time
}

func newCallClient(base *http.Client, header http.Header, now func() time.Time) *http.Client {
	rt := base.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	c := *base
	c.Transport = &callTransport{base: rt, header: header, now: now}
	return &c
}

func (t *callTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	rec, _ := req.Context().Value(callKey{}).(*callRecord)
	if len(t.header) > 0 {
		req = req.Clone(req.Context())
		for k, v := range t.header {
			req.Header[k] = v
		}
	}
	resp, err := t.base.RoundTrip(req)
	if rec == nil {
		return resp, err
	}
	if err != nil {
		rec.mu.Lock()
		rec.conn = err
		rec.mu.Unlock()
		return nil, err
	}
	if resp.StatusCode >= 400 {
		// Read the body here: langchaingo still gets it, unchanged.
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		se := &statusError{code: resp.StatusCode, retryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), t.now()), body: strings.TrimSpace(string(body[:min(len(body), 512)]))}
		rec.mu.Lock()
		rec.status = se
		rec.mu.Unlock()
		return resp, nil
	}
	resp.Body = &recordingBody{ReadCloser: resp.Body, rec: rec}
	return resp, nil
}

// recordingBody notes a stream cut by the network (anything but EOF).
type recordingBody struct {
	io.ReadCloser
	rec *callRecord
}

func (b *recordingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.rec.mu.Lock()
		if b.rec.conn == nil {
			b.rec.conn = err
		}
		b.rec.mu.Unlock()
	}
	return n, err
}

func newLangchainChat(ep Endpoint, model string, t timeouts, client *http.Client, retry retrier) (service.ChatModel, error) {
	m, err := newLangchainModel(ep, model, client, retry.now)
	if err != nil {
		return nil, err
	}
	return &langchainChat{ep: ep, model: model, t: t, retry: retry, llm: m}, nil
}

// Stream implements service.ChatModel with the same contract as the own
// client's: retries only before the first delta, provider failures wrap
// service.ErrUnavailable, a cancelled ctx returns ctx.Err(), an onDelta
// error comes back as is.
func (c *langchainChat) Stream(ctx context.Context, req service.ChatRequest, onDelta func(service.Delta) error) (service.Usage, error) {
	model := c.ep.modelFor(cmpOr(req.Model, c.model), req.Thinking)
	msgs := make([]llms.MessageContent, 0, len(req.Messages))
	for _, m := range req.Messages {
		role := llms.ChatMessageTypeHuman
		switch m.Role {
		case service.ChatSystem:
			role = llms.ChatMessageTypeSystem
		case service.ChatAssistant:
			role = llms.ChatMessageTypeAI
		}
		msgs = append(msgs, llms.TextParts(role, m.Content))
	}
	var st streamState
	err := c.retry.do(ctx, func() (bool, error) {
		err := c.attempt(ctx, msgs, model, req, &st, onDelta)
		return !st.emitted, err
	})
	return st.finalUsage(req), streamError(ctx, model, err)
}

// callOptions maps a request to langchaingo's options.
func (c *langchainChat) callOptions(model string, req service.ChatRequest) []llms.CallOption {
	opts := []llms.CallOption{llms.WithModel(model)}
	maxTokens := req.MaxTokens
	if req.Temperature > 0 {
		opts = append(opts, llms.WithTemperature(req.Temperature))
	}
	if req.JSON {
		opts = append(opts, llms.WithJSONMode())
	}
	if req.Thinking && c.ep.Thinking == ThinkingAuto && c.ep.Provider == ProviderAnthropic {
		// Anthropic's extended thinking: a token budget, which max_tokens
		// must exceed, and temperature 1 (the API refuses any other).
		if maxTokens <= 0 {
			maxTokens = 4096
		}
		maxTokens += c.ep.ThinkingBudget
		opts = append(opts,
			llms.WithThinking(&llms.ThinkingConfig{BudgetTokens: c.ep.ThinkingBudget, StreamThinking: true}),
			llms.WithTemperature(1))
	}
	if maxTokens > 0 {
		opts = append(opts, llms.WithMaxTokens(maxTokens))
	}
	return opts
}

func (c *langchainChat) attempt(ctx context.Context, msgs []llms.MessageContent, model string, req service.ChatRequest, st *streamState, onDelta func(service.Delta) error) (err error) {
	// langchaingo's parsers read what a vendor (or a proxy) sends; a panic
	// there fails this call, not the instance.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("langchaingo %s panicked: %v", c.ep.Provider, p)
		}
	}()
	st.answer.Reset()
	st.reasoning.Reset()
	st.usage = nil

	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	rec := &callRecord{}
	actx = context.WithValue(actx, callKey{}, rec)
	wd := startWatchdog(c.t, cancel)
	defer wd.stop()

	var cbErr error
	emit := func(kind service.DeltaKind, s string) error {
		if s == "" {
			return nil
		}
		wd.token()
		if kind == service.DeltaThink {
			st.reasoning.WriteString(s)
			if !req.Thinking {
				return nil
			}
		} else {
			st.answer.WriteString(s)
		}
		st.emitted = true
		if err := onDelta(service.Delta{Kind: kind, Text: s}); err != nil {
			// Some providers ignore the callback's error; stop them anyway.
			cbErr = err
			cancel()
			return err
		}
		return nil
	}
	opts := append(c.callOptions(model, req),
		llms.WithStreamingFunc(func(_ context.Context, chunk []byte) error {
			return emit(service.DeltaResponse, string(chunk))
		}),
		llms.WithStreamingReasoningFunc(func(_ context.Context, reasoning, _ []byte) error {
			// Answer text also arrives through the streaming func above.
			return emit(service.DeltaThink, string(reasoning))
		}))
	resp, err := c.llm.GenerateContent(actx, msgs, opts...)
	switch {
	case cbErr != nil:
		return &callbackError{cbErr}
	case wd.timedOut():
		return wd.err()
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		status, conn := rec.get()
		if status != nil {
			return status
		}
		if conn != nil {
			return &connError{conn}
		}
		return err
	}
	if status, _ := rec.get(); status != nil {
		// An SDK that reported no error for a failed call.
		return status
	}
	if resp != nil {
		st.usage = usageOf(resp)
	}
	if st.usage != nil && c.ep.Provider == ProviderGoogleAI {
		// generative-ai-go v0.15 keeps the usageMetadata of a stream's first
		// chunk only (a TODO in its joinResponses): the prompt count is
		// right, the completion count is not, so count that here.
		st.usage.CompletionTokens = text.CountTokens(st.reasoning.String() + st.answer.String())
		st.usage.TotalTokens = st.usage.PromptTokens + st.usage.CompletionTokens
	}
	return nil
}

// usageOf reads the token counts langchaingo providers leave, under
// different names, in GenerationInfo.
func usageOf(resp *llms.ContentResponse) *service.Usage {
	for _, ch := range resp.Choices {
		info := ch.GenerationInfo
		for _, names := range [][2]string{{"PromptTokens", "CompletionTokens"}, {"InputTokens", "OutputTokens"}, {"input_tokens", "output_tokens"}} {
			p, okP := intOf(info[names[0]])
			c, okC := intOf(info[names[1]])
			if okP || okC {
				return &service.Usage{PromptTokens: p, CompletionTokens: c, TotalTokens: p + c}
			}
		}
	}
	return nil
}

func intOf(v any) (int, bool) {
	switch n := v.(type) {
	case int:
		return n, true
	case int32:
		return int(n), true
	case int64:
		return int(n), true
	case float64:
		return int(n), true
	}
	return 0, false
}
