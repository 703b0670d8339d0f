package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/chat"
)

// completionWriter translates the chat pipeline's events (chat.Event) into
// OpenAI's chat.completion (non-stream) or chat.completion.chunk events
// (stream). The pipeline is not re-implemented here: queueing, rate
// limits, stop and storage are chat.Service's.
//
// When the stream starts matters: until a 200 goes out, a refusal can still
// be an HTTP error (429 with Retry-After, which OpenAI's SDKs retry). So the
// status line is held while nothing needs saying, and sent at the first of:
// the request starting to wait in the queue (refusals that need no waiting
// — the chat rate, a full queue, the user's share of it, the queue being
// down — come before that and are HTTP errors), the answer's first piece or
// its sources, or the first keep-alive. From then on the client sees SSE
// comments while the request waits (queue waiting is invisible to OpenAI
// clients) and a refusal or failure as an error chunk, the way OpenAI
// reports errors in a stream: data: {"error":{…}}.
type completionWriter struct {
	c            *gin.Context
	stream       bool
	includeUsage bool
	model        string
	created      int64

	mu       sync.Mutex
	id       string
	started  bool  // stream: the 200 and headers are out
	roleSent bool  // stream: the first chunk (role) is out
	ended    bool  // an error or the final answer was written: later events are dropped
	err      error // the first write error: the client is gone

	content   strings.Builder // non-stream: the answer so far
	reasoning strings.Builder
	sources   []oaiSource
	userStop  bool // the user stopped the answer: it ends as a (short) completed one
	// retryAfter is the queue's estimate (seconds) on a busy reject.
	retryAfter int
}

func newCompletionWriter(c *gin.Context, in oaiRequest, now time.Time) *completionWriter {
	return &completionWriter{
		c: c, stream: in.Stream, includeUsage: in.Stream && in.StreamOptions != nil && in.StreamOptions.IncludeUsage,
		model: in.Model, created: now.Unix(), id: "chatcmpl-" + fmt.Sprint(now.UnixNano()),
	}
}

// oaiSource is one source of the answer, in the sources extension field of
// the final message or chunk (docs/openai-api.md "OpenAI-compatible API"); index is the
// n of the answer's [n] citations.
type oaiSource struct {
	Index        int        `json:"index"`
	DocumentID   service.ID `json:"document_id"`
	DocumentName string     `json:"document_name"`
	ChunkID      service.ID `json:"chunk_id"`
	Score        float64    `json:"score"`
	Excerpt      string     `json:"excerpt"`
}

type oaiCompletion struct {
	ID      string      `json:"id"`
	Object  string      `json:"object"`
	Created int64       `json:"created"`
	Model   string      `json:"model"`
	Choices []oaiChoice `json:"choices"`
	Usage   *oaiUsage   `json:"usage,omitempty"`
}

type oaiChoice struct {
	Index        int         `json:"index"`
	Message      *oaiContent `json:"message,omitempty"`
	Delta        *oaiContent `json:"delta,omitempty"`
	Logprobs     *struct{}   `json:"logprobs"`
	FinishReason *string     `json:"finish_reason"`
}

// oaiContent is a message (non-stream) or a delta (stream). Sources is the
// extension, on the message and on the final chunk's delta; reasoning
// appears only with reasoning_effort, named as DeepSeek and Qwen do.
type oaiContent struct {
	Role             string      `json:"role,omitempty"`
	Content          *string     `json:"content,omitempty"`
	ReasoningContent string      `json:"reasoning_content,omitempty"`
	Sources          []oaiSource `json:"sources,omitzero"`
}

type oaiUsage struct {
	PromptTokens     int `json:"prompt_tokens"`
	CompletionTokens int `json:"completion_tokens"`
	TotalTokens      int `json:"total_tokens"`
}

// emit receives the pipeline's events in protocol order.
func (w *completionWriter) emit(e chat.Event) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return w.err
	}
	switch d := e.Data.(type) {
	case chat.Meta:
		w.id = "chatcmpl-" + d.MessageID.String()
		h := w.c.Writer.Header()
		h.Set(headerConversation, d.ConversationID.String())
		h.Set(headerTask, d.TaskID.String())
	case chat.Queue:
		if w.stream {
			w.start()
			w.comment("waiting for a model slot")
		}
	case chat.Sources:
		w.sources = make([]oaiSource, len(d.Sources))
		for i, s := range d.Sources {
			w.sources[i] = oaiSource{Index: s.Index, DocumentID: s.DocumentID, DocumentName: s.DocumentName, ChunkID: s.ChunkID, Score: s.Score, Excerpt: s.Excerpt}
		}
		if w.stream {
			w.role()
		}
	case chat.Message:
		w.message(d)
	case chat.Reject:
		w.retryAfter = d.RetryAfter
		w.fail(statusOf(d.Code), d.Code, d.Message)
	case chat.Error:
		w.fail(statusOf(d.Code), d.Code, d.Message)
	case *chat.Error: // the pipeline's failures are sent by pointer
		w.fail(statusOf(d.Code), d.Code, d.Message)
	case chat.Cancel:
		switch d.Reason {
		case chat.ReasonUser:
			w.userStop = true
		case chat.ReasonShutdown:
			w.fail(http.StatusServiceUnavailable, "unavailable", "the server is shutting down; try again")
		}
	case chat.Finish:
		w.finish(d)
	}
	if e.Name == chat.EventDone && w.stream && w.started {
		w.data([]byte("[DONE]"))
		w.ended = true
	}
	return w.err
}

func statusOf(code string) int {
	if s, ok := statuses[code]; ok {
		return s
	}
	return http.StatusInternalServerError
}

func (w *completionWriter) message(d chat.Message) {
	if !w.stream {
		if d.Type == service.DeltaThink {
			w.reasoning.WriteString(d.Delta)
		} else {
			w.content.WriteString(d.Delta)
		}
		return
	}
	w.role()
	delta := &oaiContent{}
	if d.Type == service.DeltaThink {
		delta.ReasoningContent = d.Delta
	} else {
		delta.Content = &d.Delta
	}
	w.chunk([]oaiChoice{{Delta: delta}}, nil)
}

// fail reports a refusal or failure: an HTTP error while nothing is out,
// else an error chunk (after which [DONE] still ends the stream).
func (w *completionWriter) fail(status int, code, message string) {
	if !w.started {
		w.dropHeaders()
		if status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable {
			// The queue's estimate (chat.Reject), else the default.
			seconds := w.retryAfter
			if seconds <= 0 {
				seconds = defaultRetryAfter(status)
			}
			w.c.Header("Retry-After", strconv.Itoa(seconds))
		}
		failOpenAI(w.c, status, code, message)
		w.ended = true
		return
	}
	b, _ := json.Marshal(newOAIError(status, code, message))
	w.data(b)
}

// refused reports an error of a turn that never started (chat.Service.Chat
// returned it before any event): as an HTTP error, unless a keep-alive
// started the stream meanwhile.
func (w *completionWriter) refused(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	if !w.started {
		w.dropHeaders()
		fail(w.c, err)
		return
	}
	status, detail := classify(err)
	w.fail(status, openAICode(err, detail.Code), detail.Message)
	w.data([]byte("[DONE]"))
}

// finish writes the answer: the whole completion, or the final chunk with
// the finish reason and the sources, then the usage chunk when asked for.
// A rejected or failed turn was reported already.
func (w *completionWriter) finish(d chat.Finish) {
	if d.Status != service.MessageCompleted && !(d.Status == service.MessageCancelled && w.userStop) {
		return
	}
	usage := &oaiUsage{}
	if d.Usage != nil {
		usage = &oaiUsage{PromptTokens: d.Usage.PromptTokens, CompletionTokens: d.Usage.CompletionTokens, TotalTokens: d.Usage.TotalTokens}
	}
	sources := w.sources
	if sources == nil {
		sources = []oaiSource{}
	}
	stop := "stop"
	if !w.stream {
		content := w.content.String()
		msg := &oaiContent{Role: "assistant", Content: &content, ReasoningContent: w.reasoning.String(), Sources: sources}
		w.c.JSON(http.StatusOK, oaiCompletion{
			ID: w.id, Object: "chat.completion", Created: w.created, Model: w.model,
			Choices: []oaiChoice{{Message: msg, FinishReason: &stop}}, Usage: usage,
		})
		w.ended = true
		return
	}
	w.role()
	w.chunk([]oaiChoice{{Delta: &oaiContent{Sources: sources}, FinishReason: &stop}}, nil)
	if w.includeUsage {
		w.chunk([]oaiChoice{}, usage)
	}
}

// role opens the answer with OpenAI's first chunk: the assistant role.
func (w *completionWriter) role() {
	if w.roleSent {
		return
	}
	w.roleSent = true
	empty := ""
	w.chunk([]oaiChoice{{Delta: &oaiContent{Role: "assistant", Content: &empty}}}, nil)
}

func (w *completionWriter) chunk(choices []oaiChoice, usage *oaiUsage) {
	b, err := json.Marshal(oaiCompletion{ID: w.id, Object: "chat.completion.chunk", Created: w.created, Model: w.model, Choices: choices, Usage: usage})
	if err != nil {
		w.err = err
		return
	}
	w.data(b)
}

// start sends the status line and headers of the stream.
func (w *completionWriter) start() {
	if w.started {
		return
	}
	w.started = true
	h := w.c.Writer.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	w.c.Writer.WriteHeader(http.StatusOK)
}

func (w *completionWriter) data(b []byte) {
	w.start()
	w.write("data: " + string(b) + "\n\n")
}

func (w *completionWriter) comment(text string) { w.write(": " + text + "\n\n") }

func (w *completionWriter) write(s string) {
	if w.err != nil {
		return
	}
	if _, err := w.c.Writer.WriteString(s); err != nil {
		w.err = err
		return
	}
	w.err = http.NewResponseController(w.c.Writer).Flush()
}

// dropHeaders removes the turn's headers from an error response: a
// refused new conversation was never stored.
func (w *completionWriter) dropHeaders() {
	h := w.c.Writer.Header()
	h.Del(headerConversation)
	h.Del(headerTask)
}

// keepAlive sends a comment every interval until the returned stop is
// called, starting the stream if nothing has yet (see completionWriter).
// One timer per stream, as sseWriter.keepAlive.
func (w *completionWriter) keepAlive(interval time.Duration) (stop func()) {
	var timer *time.Timer
	var stopped bool
	tick := func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if w.ended || stopped || w.err != nil {
			return
		}
		w.start()
		w.comment("keep-alive")
		timer.Reset(interval)
	}
	w.mu.Lock()
	timer = time.AfterFunc(interval, tick)
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		stopped = true
		timer.Stop()
		w.mu.Unlock()
	}
}
