package llm

import (
	"encoding/json"
	"fmt"

	"github.com/ragent-go/ragent/service"
)

// Ollama's native /api/chat streams one JSON object per line (NDJSON). It
// is used instead of Ollama's OpenAI-compatible /v1 because only the
// native API takes the top-level "think" switch and returns the reasoning
// apart (message.thinking) — langchaingo v0.1.14 puts think inside
// "options", where Ollama ignores it, and drops message.thinking.

type ollamaBody struct {
	Model    string                `json:"model"`
	Messages []service.ChatMessage `json:"messages"`
	Stream   bool                  `json:"stream"`
	Think    *bool                 `json:"think,omitempty"`
	Format   string                `json:"format,omitempty"`
	Options  map[string]any        `json:"options,omitempty"`
}

type ollamaLine struct {
	Message *struct {
		Content  string `json:"content"`
		Thinking string `json:"thinking"`
	} `json:"message"`
	Done            bool   `json:"done"`
	DoneReason      string `json:"done_reason"`
	PromptEvalCount int    `json:"prompt_eval_count"`
	EvalCount       int    `json:"eval_count"`
	Error           string `json:"error"`
}

func (c *httpChat) ollamaBody(req service.ChatRequest, model string) ([]byte, error) {
	b := ollamaBody{Model: model, Messages: req.Messages, Stream: true}
	if c.ep.Thinking != ThinkingOff {
		// Sent both ways: thinking models (qwen3, deepseek-r1) think by
		// default, which only slows down rewrite, intent and title.
		b.Think = &req.Thinking
	}
	if req.JSON {
		b.Format = "json"
	}
	opts := map[string]any{}
	if req.Temperature > 0 {
		opts["temperature"] = req.Temperature
	}
	if req.MaxTokens > 0 {
		opts["num_predict"] = req.MaxTokens
	}
	if len(opts) > 0 {
		b.Options = opts
	}
	return json.Marshal(b)
}

// decodeOllama reads one NDJSON line of /api/chat.
func decodeOllama(line []byte) (piece, bool) {
	var l ollamaLine
	if len(line) == 0 || json.Unmarshal(line, &l) != nil {
		return piece{}, false
	}
	if l.Error != "" {
		return piece{err: fmt.Errorf("upstream error in stream: %s", l.Error)}, true
	}
	var p piece
	if l.Message != nil {
		p.reasoning, p.content = l.Message.Thinking, l.Message.Content
	}
	if l.Done {
		p.done, p.finished = true, true
		p.usage = &service.Usage{PromptTokens: l.PromptEvalCount, CompletionTokens: l.EvalCount, TotalTokens: l.PromptEvalCount + l.EvalCount}
	}
	return p, true
}
