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
	"strings"
	"sync/atomic"
	"time"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/text"
)

// openAIChat streams completions from an OpenAI-compatible
// /chat/completions endpoint.
type openAIChat struct {
	baseURL string
	apiKey  string
	model   string
	cfg     Config
	http    *http.Client
	retry   retrier
}

type chatBody struct {
	Model          string                `json:"model"`
	Messages       []service.ChatMessage `json:"messages"`
	Stream         bool                  `json:"stream"`
	StreamOptions  *streamOptions        `json:"stream_options,omitempty"`
	Temperature    *float64              `json:"temperature,omitempty"`
	MaxTokens      int                   `json:"max_tokens,omitempty"`
	ResponseFormat *responseFormat       `json:"response_format,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type responseFormat struct {
	Type string `json:"type"`
}

// chatChunk is one streamed chunk. Reasoning arrives as reasoning_content
// (DeepSeek, Qwen/DashScope, vLLM) or reasoning (Ollama, OpenRouter).
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

// timeoutError is a stream that went silent. It is not retried: the wait
// already spent the caller's patience.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string { return e.msg }

// Stream implements service.ChatModel. Failures before the first delta are
// retried per Config.MaxRetries; once a delta has been emitted an error
// ends the stream. Provider failures wrap service.ErrUnavailable; a
// cancelled ctx returns ctx.Err(); an onDelta error is returned as is. The
// usage is returned on every path: the provider's count when it sent one,
// else an estimate of what was streamed.
func (c *openAIChat) Stream(ctx context.Context, req service.ChatRequest, onDelta func(service.Delta) error) (service.Usage, error) {
	body, err := c.requestBody(req)
	if err != nil {
		return service.Usage{}, err
	}
	var st streamState
	err = c.retry.do(ctx, func() (bool, error) {
		err := c.attempt(ctx, body, req.Thinking, &st, onDelta)
		return !st.emitted, err
	})
	usage := st.finalUsage(req)
	if err == nil {
		return usage, nil
	}
	var cb *callbackError
	if errors.As(err, &cb) {
		return usage, cb.err
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return usage, ctxErr
	}
	return usage, fmt.Errorf("%w: chat model %s: %w", service.ErrUnavailable, c.modelFor(req), err)
}

func (c *openAIChat) modelFor(req service.ChatRequest) string {
	if req.Model != "" {
		return req.Model
	}
	return c.model
}

func (c *openAIChat) requestBody(req service.ChatRequest) ([]byte, error) {
	b := chatBody{
		Model:         c.modelFor(req),
		Messages:      req.Messages,
		Stream:        true,
		StreamOptions: &streamOptions{IncludeUsage: true},
		MaxTokens:     req.MaxTokens,
	}
	// A zero temperature in ChatRequest means "the model's default", since
	// the field cannot tell an explicit 0 from an unset one.
	if req.Temperature > 0 {
		b.Temperature = &req.Temperature
	}
	if req.JSON {
		b.ResponseFormat = &responseFormat{Type: "json_object"}
	}
	return json.Marshal(b)
}

// attempt sends the request once and streams its answer into st.
func (c *openAIChat) attempt(ctx context.Context, body []byte, thinking bool, st *streamState, onDelta func(service.Delta) error) error {
	// Only an attempt that emitted nothing is ever retried, so whatever a
	// failed one gathered (reasoning not shown, a usage) is discarded.
	st.answer.Reset()
	st.reasoning.Reset()
	st.usage = nil

	actx, cancel := context.WithCancel(ctx)
	defer cancel()

	// One timer watches the stream: first for the first token, then reset
	// on every token for the gap to the next. Firing cancels the request,
	// which unblocks the read below.
	var gotToken, timedOut atomic.Bool
	watchdog := time.AfterFunc(c.cfg.FirstTokenTimeout, func() {
		timedOut.Store(true)
		cancel()
	})
	defer watchdog.Stop()
	silence := func() error {
		if gotToken.Load() {
			return &timeoutError{fmt.Sprintf("no token for %s", c.cfg.IdleTimeout)}
		}
		return &timeoutError{fmt.Sprintf("no first token within %s", c.cfg.FirstTokenTimeout)}
	}
	// failed names the cause of a transport error: our watchdog, the
	// caller's cancellation, or the network.
	failed := func(err error) error {
		switch {
		case timedOut.Load():
			return silence()
		case ctx.Err() != nil:
			return ctx.Err()
		}
		return &connError{err}
	}

	httpReq, err := http.NewRequestWithContext(actx, http.MethodPost, c.baseURL+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return err
	}
	httpReq.Header.Set("Content-Type", "application/json")
	httpReq.Header.Set("Accept", "text/event-stream")
	if c.apiKey != "" {
		httpReq.Header.Set("Authorization", "Bearer "+c.apiKey)
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

	finished := false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		// Server-sent events; OpenAI-compatible servers put one JSON chunk
		// on each data line. Comments (": keep-alive"), event names and
		// blank lines carry nothing we need.
		line := sc.Bytes()
		data, ok := bytes.CutPrefix(line, []byte("data:"))
		if !ok {
			continue
		}
		data = bytes.TrimSpace(data)
		if string(data) == "[DONE]" {
			return nil
		}
		var chunk chatChunk
		if err := json.Unmarshal(data, &chunk); err != nil {
			continue // some gateways interleave non-JSON notices
		}
		if chunk.Error != nil {
			return fmt.Errorf("upstream error in stream: %s", chunk.Error.Message)
		}
		if chunk.Usage != nil {
			st.usage = &service.Usage{
				PromptTokens:     chunk.Usage.PromptTokens,
				CompletionTokens: chunk.Usage.CompletionTokens,
				TotalTokens:      chunk.Usage.TotalTokens,
			}
		}
		if len(chunk.Choices) == 0 {
			continue
		}
		ch := chunk.Choices[0]
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			finished = true
		}
		reasoning := ch.Delta.ReasoningContent + ch.Delta.Reasoning
		if reasoning == "" && ch.Delta.Content == "" {
			continue
		}
		gotToken.Store(true)
		watchdog.Reset(c.cfg.IdleTimeout)
		if reasoning != "" {
			st.reasoning.WriteString(reasoning)
			if thinking {
				if err := emit(service.DeltaThink, reasoning); err != nil {
					return err
				}
			}
		}
		if ch.Delta.Content != "" {
			st.answer.WriteString(ch.Delta.Content)
			if err := emit(service.DeltaResponse, ch.Delta.Content); err != nil {
				return err
			}
		}
	}
	if err := sc.Err(); err != nil {
		return failed(err)
	}
	if timedOut.Load() {
		return silence()
	}
	if !finished {
		// Without [DONE] or a finish reason the answer may be cut short.
		return &connError{io.ErrUnexpectedEOF}
	}
	return nil
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
	return u
}
