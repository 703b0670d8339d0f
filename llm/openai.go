package llm

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// httpChat is ragent's own streaming client. It speaks the OpenAI
// /chat/completions server-sent events (OpenAI-compatible servers, Azure
// deployments, Mistral) and Ollama's native /api/chat NDJSON (ollama.go).
type httpChat struct {
	ep    Endpoint
	model string
	t     timeouts
	http  *http.Client
	retry retrier
}

func newHTTPChat(ep Endpoint, model string, t timeouts, client *http.Client, retry retrier) *httpChat {
	ep.BaseURL = strings.TrimRight(ep.BaseURL, "/")
	return &httpChat{ep: ep, model: model, t: t, http: client, retry: retry}
}

type chatBody struct {
	Model          string                `json:"model"`
	Messages       []service.ChatMessage `json:"messages"`
	Stream         bool                  `json:"stream"`
	StreamOptions  *streamOptions        `json:"stream_options,omitempty"`
	Temperature    *float64              `json:"temperature,omitempty"`
	MaxTokens      int                   `json:"max_tokens,omitempty"`
	ResponseFormat *responseFormat       `json:"response_format,omitempty"`
	// EnableThinking is Qwen3's switch (DashScope/Bailian), sent only when
	// the endpoint's thinking mode is enable_thinking.
	EnableThinking *bool `json:"enable_thinking,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type responseFormat struct {
	Type string `json:"type"`
}

// chatChunk is one streamed chunk. Reasoning arrives as reasoning_content
// (DeepSeek, Qwen/DashScope, vLLM) or reasoning (Ollama's /v1, OpenRouter).
type chatChunk struct {
	Choices []struct {
		Delta struct {
			Content          string `json:"content"`
			ReasoningContent string `json:"reasoning_content"`
			Reasoning        string `json:"reasoning"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
		TotalTokens      int `json:"total_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// piece is what one line of a stream carries.
type piece struct {
	reasoning, content string
	usage              *service.Usage
	finished           bool // a finish reason: the answer is complete
	done               bool // the end of the stream
	err                error
}

// streamState is what one Stream call has produced so far, across attempts.
type streamState struct {
	emitted   bool // a delta reached the caller: no more retries
	answer    strings.Builder
	reasoning strings.Builder
	usage     *service.Usage // as reported by the provider
}

// callbackError carries the caller's own onDelta error out unchanged.
type callbackError struct{ err error }

func (e *callbackError) Error() string { return e.err.Error() }
func (e *callbackError) Unwrap() error { return e.err }

// Stream implements service.ChatModel. Failures before the first delta are
// retried per Config.MaxRetries; once a delta has been emitted an error
// ends the stream. Provider failures wrap service.ErrUnavailable; a
// cancelled ctx returns ctx.Err(); an onDelta error is returned as is. The
// usage is returned on every path: the provider's count when it sent one,
// else an estimate of what was streamed.
func (c *httpChat) Stream(ctx context.Context, req service.ChatRequest, onDelta func(service.Delta) error) (service.Usage, error) {
	model := c.ep.modelFor(cmpOr(req.Model, c.model), req.Thinking)
	body, err := c.requestBody(req, model)
	if err != nil {
		return service.Usage{}, err
	}
	var st streamState
	err = c.retry.do(ctx, func() (bool, error) {
		err := c.attempt(ctx, body, model, req.Thinking, &st, onDelta)
		return !st.emitted, err
	})
	return st.finalUsage(req), streamError(ctx, model, err)
}

// streamError is the error Stream returns for err.
func streamError(ctx context.Context, model string, err error) error {
	if err == nil {
		return nil
	}
	var cb *callbackError
	if errors.As(err, &cb) {
		return cb.err
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return fmt.Errorf("%w: chat model %s: %w", service.ErrUnavailable, model, err)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func (c *httpChat) requestBody(req service.ChatRequest, model string) ([]byte, error) {
	if c.ep.Provider == ProviderOllama {
		return c.ollamaBody(req, model)
	}
	b := chatBody{
		Model:     model,
		Messages:  req.Messages,
		Stream:    true,
		MaxTokens: req.MaxTokens,
	}
	// Mistral refuses fields it does not know and sends the usage anyway.
	if c.ep.Provider != ProviderMistral {
		b.StreamOptions = &streamOptions{IncludeUsage: true}
	}
	// A zero temperature in ChatRequest means "the model's default", since
	// the field cannot tell an explicit 0 from an unset one.
	if req.Temperature > 0 {
		b.Temperature = &req.Temperature
	}
	if req.JSON {
		b.ResponseFormat = &responseFormat{Type: "json_object"}
	}
	if c.ep.Thinking == ThinkingEnable {
		// Sent both ways: Qwen3 thinks by default, which only slows down
		// the rewrite, intent and title calls.
		b.EnableThinking = &req.Thinking
	}
	return json.Marshal(b)
}

// newRequest addresses the endpoint's chat route with its credentials.
func (c *httpChat) newRequest(ctx context.Context, model string, body []byte) (*http.Request, error) {
	var u string
	switch c.ep.Provider {
	case ProviderOllama:
		u = ollamaNativeBase(c.ep.BaseURL) + "/api/chat"
	case ProviderAzure:
		// Azure addresses a deployment, not a model, and authenticates with
		// an api-key header.
		u = c.ep.BaseURL + "/openai/deployments/" + url.PathEscape(model) + "/chat/completions?api-version=" + url.QueryEscape(c.ep.APIVersion)
	default:
		u = c.ep.BaseURL + "/chat/completions"
	}
	httpReq, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	httpReq.Header.Set("Content-Type", "application/json")
	if c.ep.Provider == ProviderOllama {
		httpReq.Header.Set("Accept", "application/x-ndjson")
	} else {
		httpReq.Header.Set("Accept", "text/event-stream")
	}
	switch {
	case c.ep.APIKey == "":
	case c.ep.Provider == ProviderAzure:
		httpReq.Header.Set("api-key", c.ep.APIKey)
	default:
		httpReq.Header.Set("Authorization", "Bearer "+c.ep.APIKey)
	}
	return httpReq, nil
}

// attempt sends the request once and streams its answer into st.
func (c *httpChat) attempt(ctx context.Context, body []byte, model string, thinking bool, st *streamState, onDelta func(service.Delta) error) error {
	// Only an attempt that emitted nothing is ever retried, so whatever a
	// failed one gathered (reasoning not shown, a usage) is discarded.
	st.answer.Reset()
	st.reasoning.Reset()
	st.usage = nil

	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	wd := startWatchdog(c.t, cancel)
	defer wd.stop()
	// failed names the cause of a transport error: our watchdog, the
	// caller's cancellation, or the network.
	failed := func(err error) error {
		switch {
		case wd.timedOut():
			return wd.err()
		case ctx.Err() != nil:
			return ctx.Err()
		}
		return &connError{err}
	}

	httpReq, err := c.newRequest(actx, model, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(httpReq)
	if err != nil {
		return failed(err)
	}
	if resp.StatusCode != http.StatusOK {
		return readStatusError(resp, c.retry.now())
	}
	defer resp.Body.Close()

	emit := func(kind service.DeltaKind, s string) error {
		st.emitted = true
		if err := onDelta(service.Delta{Kind: kind, Text: s}); err != nil {
			return &callbackError{err}
		}
		return nil
	}
	decode := decodeSSE
	if c.ep.Provider == ProviderOllama {
		decode = decodeOllama
	}

	finished := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		p, ok := decode(sc.Bytes())
		if !ok {
			continue
		}
		if p.err != nil {
			return p.err
		}
		if p.usage != nil {
			st.usage = p.usage
		}
		finished = finished || p.finished
		if p.reasoning != "" || p.content != "" {
			wd.token()
		}
		if p.reasoning != "" {
			st.reasoning.WriteString(p.reasoning)
			if thinking {
				if err := emit(service.DeltaThink, p.reasoning); err != nil {
					return err
				}
			}
		}
		if p.content != "" {
			st.answer.WriteString(p.content)
			if err := emit(service.DeltaResponse, p.content); err != nil {
				return err
			}
		}
		if p.done {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		return failed(err)
	}
	if wd.timedOut() {
		return wd.err()
	}
	if !finished {
		// Without [DONE] or a finish reason the answer may be cut short.
		return &connError{io.ErrUnexpectedEOF}
	}
	return nil
}

// decodeSSE reads one line of an OpenAI-compatible stream: server-sent
// events with one JSON chunk per data line. Comments (": keep-alive"),
// event names, blank lines and non-JSON notices some gateways interleave
// carry nothing.
func decodeSSE(line []byte) (piece, bool) {
	data, ok := bytes.CutPrefix(line, []byte("data:"))
	if !ok {
		return piece{}, false
	}
	data = bytes.TrimSpace(data)
	if string(data) == "[DONE]" {
		return piece{done: true, finished: true}, true
	}
	var chunk chatChunk
	if err := json.Unmarshal(data, &chunk); err != nil {
		return piece{}, false
	}
	var p piece
	if chunk.Error != nil {
		p.err = fmt.Errorf("upstream error in stream: %s", chunk.Error.Message)
		return p, true
	}
	if u := chunk.Usage; u != nil {
		p.usage = &service.Usage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.TotalTokens}
	}
	if len(chunk.Choices) > 0 {
		ch := chunk.Choices[0]
		p.finished = ch.FinishReason != nil && *ch.FinishReason != ""
		p.reasoning = ch.Delta.ReasoningContent + ch.Delta.Reasoning
		p.content = ch.Delta.Content
	}
	return p, true
}

// finalUsage is the provider's count, or an estimate when it sent none
// (older servers ignore stream_options, and a cancelled stream never gets
// its final chunk).
func (st *streamState) finalUsage(req service.ChatRequest) service.Usage {
	if st.usage != nil {
		u := *st.usage
		if u.TotalTokens == 0 {
			u.TotalTokens = u.PromptTokens + u.CompletionTokens
		}
		return u
	}
	return estimateUsage(req.Messages, st.reasoning.String()+st.answer.String())
}

func estimateUsage(msgs []service.ChatMessage, completion string) service.Usage {
	var u service.Usage
	for _, m := range msgs {
		// About four tokens of chat-template framing per message.
		u.PromptTokens += text.CountTokens(m.Content) + 4
	}
	u.CompletionTokens = text.CountTokens(completion)
	u.TotalTokens = u.PromptTokens + u.CompletionTokens
	u.Estimated = true
	return u
}
