package api

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/chat"
)

// The OpenAI-compatible API (docs/openai-api.md "OpenAI-compatible API"): POST
// /v1/chat/completions and GET /v1/models, so chat clients and bots built on
// OpenAI's SDKs talk to ragent's RAG pipeline unchanged. A "model" is a view
// of ragent: "ragent" routes by the intent tree as the web UI does,
// "ragent/<knowledge base name or id>" retrieves from that one. The handlers
// translate; the pipeline, its queue, rate limits, stop and storage are
// /api/v1/chat's own (chat.Service).

// modelRagent is the model that routes by intent; modelPrefix names one
// knowledge base.
const (
	modelRagent = "ragent"
	modelPrefix = "ragent/"
)

// Response headers naming the stored turn: the conversation (send it back
// as X-Ragent-Conversation to continue it) and the task (for POST
// /api/v1/chat/tasks/{taskId}/stop).
const (
	headerConversation = "X-Ragent-Conversation"
	headerTask         = "X-Ragent-Task"
)

// ctxOpenAI marks a request of the OpenAI-compatible routes: its errors take
// OpenAI's shape (failOpenAI).
const ctxOpenAI = "ragent.openai"

// openAIErrors makes every error of the routes after it OpenAI-shaped,
// authentication and body errors included.
func openAIErrors(c *gin.Context) {
	c.Set(ctxOpenAI, true)
	c.Next()
}

func openAIRoute(c *gin.Context) bool { return c.GetBool(ctxOpenAI) }

// oaiError is OpenAI's error body. Code is ragent's code (service.CodeOf, or
// the edge's own such as malformed_json), except model_not_found, which
// OpenAI's clients know; Type is OpenAI's class of the HTTP status.
type oaiError struct {
	Error oaiErrorDetail `json:"error"`
}

type oaiErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

func oaiErrorType(status int) string {
	switch {
	case status == http.StatusUnauthorized:
		return "authentication_error"
	case status == http.StatusForbidden:
		return "permission_error"
	case status == http.StatusTooManyRequests:
		return "rate_limit_error"
	case status >= 500:
		return "server_error"
	default:
		return "invalid_request_error"
	}
}

func newOAIError(status int, code, message string) oaiError {
	return oaiError{Error: oaiErrorDetail{Message: message, Type: oaiErrorType(status), Code: code}}
}

// failOpenAI writes an OpenAI-shaped error and aborts the chain.
func failOpenAI(c *gin.Context, status int, code, message string) {
	c.AbortWithStatusJSON(status, newOAIError(status, code, message))
}

// oaiRequest is the part of OpenAI's chat completion request that means
// something here. Other parameters (temperature, seed, …) are accepted and
// ignored: the pipeline sets its own. Those whose meaning
// cannot be kept (n > 1, tools, a JSON response format) are refused.
type oaiRequest struct {
	Model         string       `json:"model"`
	Messages      []oaiMessage `json:"messages"`
	Stream        bool         `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	N              *int            `json:"n"`
	Tools          json.RawMessage `json:"tools"`
	Functions      json.RawMessage `json:"functions"`
	ResponseFormat *struct {
		Type string `json:"type"`
	} `json:"response_format"`
	// ReasoningEffort other than "none" turns on deep thinking: reasoning
	// comes back as reasoning_content.
	ReasoningEffort string `json:"reasoning_effort"`
	// User is OpenAI's end-user tag; accepted, not used.
	User string `json:"user"`
	// MaxTokens and MaxCompletionTokens (newer SDKs) cap the answer, within
	// RAGENT_CHAT_MAX_ANSWER_TOKENS; the second wins when both are sent.
	MaxTokens           *int `json:"max_tokens"`
	MaxCompletionTokens *int `json:"max_completion_tokens"`
}

// oaiMessage is one input message; Content is a string or an array of
// content parts, of which only text parts are understood.
type oaiMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text returns the message's text: the string, or its text parts joined.
func (m oaiMessage) text(i int) (string, error) {
	raw := strings.TrimSpace(string(m.Content))
	if raw == "" || raw == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(m.Content, &s); err == nil {
		return s, checkText(fmt.Sprintf("`messages[%d].content`", i), s)
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(m.Content, &parts); err != nil {
		return "", service.Errorf(service.ErrInvalid, "messages[%d].content must be a string or an array of content parts", i)
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		if p.Type != "text" {
			return "", service.Errorf(service.ErrInvalid, "messages[%d].content[%d] is of type %q; only text is supported", i, j, p.Type)
		}
		if err := checkText(fmt.Sprintf("`messages[%d].content[%d].text`", i, j), p.Text); err != nil {
			return "", err
		}
		texts = append(texts, p.Text)
	}
	return strings.Join(texts, "\n"), nil
}

// chatRequest turns an OpenAI request into the pipeline's: the last message
// is the question (it must be the user's), earlier user and assistant
// messages the history, system and developer messages the client's
// instructions.
func (s *Server) chatRequest(c *gin.Context, in oaiRequest) (chat.Request, error) {
	var req chat.Request
	switch {
	case in.N != nil && *in.N != 1:
		return req, service.Errorf(service.ErrInvalid, "n must be 1: one answer per request")
	case present(in.Tools) || present(in.Functions):
		return req, service.Errorf(service.ErrInvalid, "tools and functions are not supported: ragent answers from its knowledge bases")
	case in.ResponseFormat != nil && in.ResponseFormat.Type != "" && in.ResponseFormat.Type != "text":
		return req, service.Errorf(service.ErrInvalid, "response_format %q is not supported; only text", in.ResponseFormat.Type)
	case len(in.Messages) == 0:
		return req, service.Errorf(service.ErrInvalid, "messages must not be empty")
	}
	kbIDs, err := s.resolveModel(c, in.Model)
	if err != nil {
		return req, err
	}
	req.KnowledgeBaseIDs = kbIDs
	req.DeepThinking = in.ReasoningEffort != "" && in.ReasoningEffort != "none"
	req.MaxTokens = cmp.Or(in.MaxCompletionTokens, in.MaxTokens)
	var instructions []string
	last := len(in.Messages) - 1
	for i, m := range in.Messages {
		text, err := m.text(i)
		if err != nil {
			return req, err
		}
		switch {
		case i == last && m.Role != "user":
			return req, service.Errorf(service.ErrInvalid, "the last message must be the user's question (it is %q)", m.Role)
		case i == last:
			req.Question = text
		case m.Role == "system" || m.Role == "developer":
			instructions = append(instructions, text)
		case m.Role == "user" || m.Role == "assistant":
			req.History = append(req.History, service.ChatMessage{Role: service.ChatRole(m.Role), Content: text})
		default:
			return req, service.Errorf(service.ErrInvalid, "messages[%d] has role %q; supported roles are system, developer, user and assistant", i, m.Role)
		}
	}
	req.Instructions = strings.Join(instructions, "\n\n")
	if h := c.GetHeader(headerConversation); h != "" {
		id, err := service.ParseID(h)
		if err != nil {
			return req, service.Errorf(service.ErrInvalid, "%s must be a conversation id", headerConversation)
		}
		req.ConversationID = id
	}
	return req, nil
}

// present reports whether an optional JSON value was sent with content.
func present(raw json.RawMessage) bool {
	v := strings.TrimSpace(string(raw))
	return v != "" && v != "null" && v != "[]" && v != "{}"
}

// modelNotFound is OpenAI's answer to an unknown model; a knowledge base
// the caller cannot read is unknown, as everywhere (service.Access). It is a
// service.ErrNotFound whose OpenAI code is model_not_found.
type modelNotFound struct{ model string }

func (e modelNotFound) Error() string {
	return fmt.Sprintf("The model `%s` does not exist or you do not have access to it.", e.model)
}

func (e modelNotFound) Unwrap() error { return service.ErrNotFound }

func errModelNotFound(model string) error { return modelNotFound{model} }

// openAICode is the code of err on the OpenAI routes: ragent's, except for
// the codes OpenAI's clients know.
func openAICode(err error, code string) string {
	if errors.As(err, new(modelNotFound)) {
		return "model_not_found"
	}
	return code
}

// resolveModel returns the knowledge bases a model searches: none for
// "ragent" (the intent tree decides), one for "ragent/<name or id>".
func (s *Server) resolveModel(c *gin.Context, model string) ([]service.ID, error) {
	switch {
	case model == "":
		return nil, service.Errorf(service.ErrInvalid, "model is required: %q or %q followed by a knowledge base name or id", modelRagent, modelPrefix)
	case model == modelRagent:
		return nil, nil
	case !strings.HasPrefix(model, modelPrefix):
		return nil, errModelNotFound(model)
	}
	want := strings.TrimPrefix(model, modelPrefix)
	kbs, err := s.readableKnowledgeBases(c)
	if err != nil {
		return nil, err
	}
	// An id wins over a name that looks like one.
	if id, err := service.ParseID(want); err == nil {
		for _, kb := range kbs {
			if kb.ID == id {
				return []service.ID{id}, nil
			}
		}
	}
	var named []service.ID
	for _, kb := range kbs {
		if kb.Name == want {
			named = append(named, kb.ID)
		}
	}
	switch len(named) {
	case 0:
		return nil, errModelNotFound(model)
	case 1:
		return named, nil
	}
	// Names are unique only among what their namer reads (docs/security.md
	// "Knowledge-base isolation"), so a reader may see two.
	return nil, service.Errorf(service.ErrInvalid, "several knowledge bases you read are named %q; name one by id: %s<id> (GET /v1/models lists them)", want, modelPrefix)
}

// readableKnowledgeBases lists every knowledge base the caller may read.
func (s *Server) readableKnowledgeBases(c *gin.Context) ([]*service.KnowledgeBase, error) {
	var all []*service.KnowledgeBase
	var after service.ID
	for {
		page, err := s.deps.KnowledgeBases.List(c.Request.Context(), principal(c), after, 200)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if len(page) < 200 {
			return all, nil
		}
		after = page[len(page)-1].ID
	}
}

// oaiModel is an entry of GET /v1/models. KnowledgeBaseID is an extension:
// the stable name of a knowledge base's model is ragent/<id>.
type oaiModel struct {
	ID              string     `json:"id"`
	Object          string     `json:"object"`
	Created         int64      `json:"created"`
	OwnedBy         string     `json:"owned_by"`
	KnowledgeBaseID service.ID `json:"knowledge_base_id,omitzero"`
}

// listModels answers GET /v1/models: "ragent" and one model per knowledge
// base the caller may read.
func (s *Server) listModels(c *gin.Context) {
	kbs, err := s.readableKnowledgeBases(c)
	if err != nil {
		fail(c, err)
		return
	}
	models := []oaiModel{{ID: modelRagent, Object: "model", Created: s.started.Unix(), OwnedBy: "ragent"}}
	names := map[string]int{}
	for _, kb := range kbs {
		names[kb.Name]++
	}
	for _, kb := range kbs {
		// A name two readable knowledge bases share names neither: the id does.
		id := modelPrefix + kb.Name
		if names[kb.Name] > 1 {
			id = modelPrefix + kb.ID.String()
		}
		models = append(models, oaiModel{ID: id, Object: "model", Created: kb.CreatedAt.Unix(), OwnedBy: "ragent", KnowledgeBaseID: kb.ID})
	}
	c.JSON(http.StatusOK, gin.H{"object": "list", "data": models})
}

// chatCompletions answers POST /v1/chat/completions: one turn of the
// pipeline, as one chat.completion or as a stream of chat.completion.chunk.
func (s *Server) chatCompletions(c *gin.Context) {
	var in oaiRequest
	if !s.bindBody(c, &in, false) {
		return
	}
	req, err := s.chatRequest(c, in)
	if err != nil {
		fail(c, err)
		return
	}
	w := newCompletionWriter(c, in, time.Now())
	if in.Stream {
		defer w.keepAlive(s.deps.PingInterval)()
	}
	if err := s.deps.Chat.Chat(c.Request.Context(), principal(c), req, w.emit); err != nil {
		w.refused(err)
	}
}
