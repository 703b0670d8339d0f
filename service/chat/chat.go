// Package chat is the RAG conversation pipeline: history → term mappings →
// rewrite → intent → retrieve → prompt → generate, streamed as events, behind
// the fair queue, with a stop that cancels the upstream model on whichever
// instance runs it.
//
// Chat emits the events of DESIGN §6 (typed in events.go) through a
// callback; the api package writes them as Server-Sent Events. Every request
// ends with exactly one finish event followed by done, whatever happened in
// between.
//
// What a turn writes: a user over the chat rate gets ErrBusy before anything
// is written or streamed. A new conversation and the question are written
// only once the turn holds an LLM slot; then the answer is saved for every
// terminal status. A turn that never got a slot (rejected as busy or
// unavailable, or cancelled while queued) stores nothing in a new
// conversation — the conversation named in meta is never created, and
// finish says "saved": false — and only its question, with the turn's
// status and no answer, in an existing one. So refusals cannot fill the
// database.
package chat

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/retrieve"
)

// Store keeps conversations and messages.
type Store interface {
	// SaveQuestion writes a turn's question in one transaction with its new
	// conversation (nil for an existing one) and its submit key (nil
	// without one); a key already taken fails it with
	// service.ErrDuplicateRequest, writing nothing.
	SaveQuestion(ctx context.Context, conv *service.Conversation, q *service.Message, submit *service.ChatSubmit) error
	// ChatSubmit returns userID's turn submitted under key
	// (service.ErrNotFound when none).
	ChatSubmit(ctx context.Context, userID service.ID, key string) (*service.ChatSubmit, error)
	Conversation(ctx context.Context, id service.ID) (*service.Conversation, error)
	// Conversations lists userID's conversations; within, when not nil,
	// keeps those whose every message searched knowledge bases among it.
	Conversations(ctx context.Context, userID, before service.ID, limit int, within []service.ID) ([]*service.Conversation, error)
	// ConversationWithin reports whether every message of a conversation
	// searched knowledge bases among within (and none an unknown set).
	ConversationWithin(ctx context.Context, id service.ID, within []service.ID) (bool, error)
	RenameConversation(ctx context.Context, id service.ID, title string) error
	DeleteConversation(ctx context.Context, id service.ID) error
	Messages(ctx context.Context, conversationID, after service.ID, limit int) ([]service.Message, error)
	RecentMessages(ctx context.Context, conversationID service.ID, n int) ([]service.Message, error)
	SaveMessage(ctx context.Context, m *service.Message, title string) error
	// DocumentKnowledgeBases maps document ids (deleted ones included) to
	// their knowledge bases, to hide history sources a reader lost.
	DocumentKnowledgeBases(ctx context.Context, ids []service.ID) (map[service.ID]service.ID, error)
}

// Limiter admits generations through the fair queue. Acquire blocks while
// the request waits, reporting its place in line, and fails with
// service.ErrBusy (queue wait exceeded or queue full) or
// service.ErrUnavailable (the queue's store is down and the policy rejects).
type Limiter interface {
	Acquire(ctx context.Context, requestID, userID string, onPosition func(position, queued int)) (release func(), err error)
}

// RateLimit bounds how many chats a user may start. Allow returns an
// ErrBusy *service.Error carrying RetryAfter when the user is over it;
// whether a failing store admits or refuses is the implementation's policy.
type RateLimit interface {
	Allow(ctx context.Context, userID string) error
}

// Tasks is the registry of running generations, the only one: it knows the
// tasks of this instance without its store, and those of every instance
// through it.
type Tasks interface {
	// Register records a running task; cancel is called, with a cause that
	// wraps service.ErrStopped, when a stop for it arrives on any instance
	// (or arrived before it registered).
	Register(ctx context.Context, taskID, ownerUserID string, cancel context.CancelCauseFunc) (unregister func(), err error)
	// Owner returns the user that owns a running task (service.ErrNotFound
	// when none runs); a task of this instance is found without the store.
	Owner(ctx context.Context, taskID string) (userID string, err error)
	// Cancel stops a task wherever it runs; local reports whether it ran
	// here (then it is stopped even when err reports the store down).
	Cancel(ctx context.Context, taskID string) (local bool, err error)
}

// Journal keeps the events of resumable turns where every instance reads
// them, for a while after the turn ends, so a client that lost its stream
// can read what it missed and follow the rest.
type Journal interface {
	// Open starts taskID's journal, readable by reader. append queues an
	// event and never waits for the store; close waits for the queued ones
	// and is called once, after the last append.
	Open(ctx context.Context, taskID string, reader service.TaskReader) (append func(service.TaskEvent), close func())
	// Reader returns who may read taskID's events (service.ErrNotFound
	// when none are kept).
	Reader(ctx context.Context, taskID string) (service.TaskReader, error)
	// Follow emits the events numbered after after, then the later ones as
	// they come, until the event named done, ctx's end or emit's error. A
	// reader asking for events no longer kept gets service.ErrConflict
	// before any is emitted.
	Follow(ctx context.Context, taskID string, after int, done string, emit func(service.TaskEvent) error) error
}

// Retriever finds relevant chunks among the knowledge bases p may read,
// saying which knowledge bases it searched.
type Retriever interface {
	Run(ctx context.Context, p service.Principal, q retrieve.Query) (retrieve.Result, error)
}

// Intents returns the intent tree (roots with children, disabled included).
type Intents interface {
	IntentTree(ctx context.Context) ([]*service.IntentNode, error)
}

// Terms returns the term mappings (disabled included).
type Terms interface {
	TermMappings(ctx context.Context) ([]service.TermMapping, error)
}

// Config tunes the pipeline.
type Config struct {
	Tracer trace.Tracer // the turn's spans; nil makes none

	// RefuseWithoutSources answers a fixed text without calling the model
	// when retrieval finds nothing (RAGENT_CHAT_EMPTY_RETRIEVAL=refuse).
	RefuseWithoutSources bool
	HistoryMessages      int // default 16
	// MaxAnswerTokens caps every answer (the model's max_tokens); a client
	// may ask for less (Request.MaxTokens). Default 4096.
	MaxAnswerTokens int
	TopK            int // sources per answer; default 5
	AnswerModel     string
	FastModel       string
	// DetachedTimeout is how long a resumable turn runs on after its client
	// went away (RAGENT_CHAT_DETACHED_TIMEOUT); 0 stops it at once.
	DetachedTimeout time.Duration
	Logger          *slog.Logger     // nil discards
	Now             func() time.Time // nil is time.Now
}

// Deps are the collaborators of the pipeline. FastModel is nil for the
// offline provider: rewrite, LLM intent scoring and title generation are
// then skipped (lexical intent matching and a truncated title instead).
type Deps struct {
	Store     Store
	Limiter   Limiter   // nil: no queue
	Rate      RateLimit // nil: no per-user chat rate
	Tasks     Tasks     // required
	Journal   Journal   // nil: no turn is resumable
	Retriever Retriever
	Access    *service.Access // which knowledge bases a caller may read
	Intents   Intents
	Terms     Terms
	Model     service.ChatModel
	FastModel service.ChatModel
	IDs       service.IDGenerator
	// Feedback keeps answer feedback (feedback.go); nil: none.
	Feedback FeedbackStore
}

// Service runs chats.
type Service struct {
	d   Deps
	cfg Config
}

// New returns a Service.
func New(d Deps, cfg Config) *Service {
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.HistoryMessages = cmp.Or(max(cfg.HistoryMessages, 0), 16)
	cfg.TopK = cmp.Or(max(cfg.TopK, 0), 5)
	cfg.MaxAnswerTokens = cmp.Or(max(cfg.MaxAnswerTokens, 0), 4096)
	return &Service{d: d, cfg: cfg}
}

// Request is one question.
type Request struct {
	Question         string       `json:"question"`
	ConversationID   service.ID   `json:"conversationId"`
	KnowledgeBaseIDs []service.ID `json:"knowledgeBaseIds"`
	DeepThinking     bool         `json:"deepThinking"`

	// History, when not empty, is the conversation so far as the client
	// holds it (the OpenAI-compatible API's earlier messages, roles user and
	// assistant): it replaces the stored history for the rewrite and the
	// prompt. It is the client's, so it is not stored.
	History []service.ChatMessage `json:"-"`
	// Instructions are the client's own system messages, given to the
	// answer model after ragent's instructions and sources.
	Instructions string `json:"-"`
	// MaxTokens, when set, is the client's own cap on the answer, within
	// Config.MaxAnswerTokens (the OpenAI-compatible API's max_tokens).
	MaxTokens *int `json:"-"`
	// Resumable turns keep their events in the Journal and run on for
	// Config.DetachedTimeout after their client went away (POST /chat);
	// the others stop when it goes (the OpenAI-compatible API).
	Resumable bool `json:"-"`
	// SubmitKey is the client's Idempotency-Key: a turn with a key already
	// stored (service.ChatSubmit) is not run again but followed (see Chat).
	SubmitKey string `json:"-"`
	// Ephemeral turns store no conversation and no message: a widget
	// visitor's (Principal.Visitor), whose history is kept by the widget
	// and sent as History. Usage is recorded all the same.
	Ephemeral bool `json:"-"`

	// mapped is Question after term mappings, set by Validate.
	mapped string
}

// BusyMessage is what a user reads when the queue turns them away.
const BusyMessage = "系统繁忙，请稍后再试"

// NoSourcesAnswer is the fixed answer of the refuse policy.
const NoSourcesAnswer = "没有找到相关文档，无法回答这个问题。No relevant documents were found for this question."

// Validate checks a request before any stream starts, so a bad request gets
// a plain 4xx instead of an event stream.
func (s *Service) Validate(ctx context.Context, p service.Principal, req *Request) error {
	req.Question = strings.TrimSpace(req.Question)
	if req.Question == "" {
		return service.Errorf(service.ErrInvalid, "question must not be empty")
	}
	if !utf8.ValidString(req.Question) {
		return service.Errorf(service.ErrInvalid, "question must be valid UTF-8")
	}
	if utf8.RuneCountInString(req.Question) > service.MaxQuestionRunes {
		return service.Errorf(service.ErrInvalid, "question must be at most %d characters", service.MaxQuestionRunes)
	}
	if len(req.KnowledgeBaseIDs) > 20 {
		return service.Errorf(service.ErrInvalid, "at most 20 knowledge bases per question")
	}
	if err := validateClientContext(req); err != nil {
		return err
	}
	if m := req.MaxTokens; m != nil && (*m < 1 || *m > s.cfg.MaxAnswerTokens) {
		return service.Errorf(service.ErrInvalid, "max_tokens must be between 1 and %d", s.cfg.MaxAnswerTokens)
	}
	if err := s.d.Access.CheckReadable(ctx, p, req.KnowledgeBaseIDs); err != nil {
		return err
	}
	if p.Visitor != "" && !req.Ephemeral {
		return service.Errorf(service.ErrForbidden, "a widget visitor's turns are not stored")
	}
	if req.ConversationID != 0 {
		if _, err := s.ownConversation(ctx, p, req.ConversationID, false); err != nil {
			return err
		}
	}
	return s.mapTerms(ctx, req)
}

// ownConversation returns the conversation when p may use it. Another
// user's conversation is reported as not found, so ids reveal nothing;
// admins (signed in as people, not through an API key) may read (readOnly)
// any conversation. An API key limited to knowledge bases reaches only the
// conversations whose every turn searched within its list
// (KeyGrant.Within); the others do not exist for it.
func (s *Service) ownConversation(ctx context.Context, p service.Principal, id service.ID, readOnly bool) (*service.Conversation, error) {
	notFound := service.Errorf(service.ErrNotFound, "conversation %s not found", id)
	c, err := s.d.Store.Conversation(ctx, id)
	if err != nil {
		if errors.Is(err, service.ErrNotFound) {
			return nil, notFound
		}
		return nil, err
	}
	if c.UserID != p.UserID && !(readOnly && p.OverridesOwnership()) || p.Visitor != "" {
		return nil, notFound
	}
	if within := p.Key.HistoryLimit(); within != nil {
		ok, err := s.d.Store.ConversationWithin(ctx, id, within)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, notFound
		}
	}
	return c, nil
}

// Chat runs one request to its end, emitting events in protocol order. It
// returns an error only when nothing could be started (then no event was
// emitted); every later failure becomes an error event.
func (s *Service) Chat(ctx context.Context, p service.Principal, req Request, emit func(Event) error) error {
	if err := s.Validate(ctx, p, &req); err != nil {
		return err
	}
	if s.d.Rate != nil {
		if err := s.d.Rate.Allow(ctx, p.Actor()); err != nil {
			return err
		}
	}
	ctx, span := s.span(ctx, "chat.turn")
	defer span.End()
	t := &turn{s: s, p: p, req: req, emit: emit, started: s.cfg.Now()}
	if err := t.begin(ctx); err != nil {
		var dup *duplicateSubmit
		if errors.As(err, &dup) {
			return s.followSubmit(ctx, p, dup.sub, emit)
		}
		return err
	}
	span.SetAttributes(attribute.String("ragent.conversation", t.conv.ID.String()), attribute.String("ragent.task", t.taskID.String()))
	t.log = s.cfg.Logger.With("conversation", t.conv.ID, "task", t.taskID, "user", p.UserID)

	// The task context: a stop (on any instance) cancels it with a cause
	// wrapping service.ErrStopped; a shutdown cancels it at once, a client
	// that went away after DetachedTimeout for a resumable turn, else at
	// once (s.detach).
	taskCtx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	defer s.detach(ctx, req.Resumable, cancel)()
	unregister, err := s.d.Tasks.Register(ctx, t.taskID.String(), p.Actor(), cancel)
	if err != nil {
		return err
	}
	defer unregister()
	if req.Resumable && s.d.Journal != nil {
		append, closeJournal := s.d.Journal.Open(ctx, t.taskID.String(), service.TaskReader{Owner: p.UserID, KnowledgeBaseIDs: t.readerScope(), Visitor: p.Visitor})
		t.journal = append
		defer closeJournal()
	}

	t.send(EventMeta, Meta{ConversationID: t.conv.ID, TaskID: t.taskID, MessageID: t.answer.ID})
	t.run(taskCtx)
	return nil
}

// Stop stops a running task of the caller (or of anyone, for admins) on
// whichever instance runs it. Another user's task is reported as not found.
func (s *Service) Stop(ctx context.Context, p service.Principal, taskID service.ID) error {
	id := taskID.String()
	owner, err := s.d.Tasks.Owner(ctx, id)
	switch {
	case errors.Is(err, service.ErrNotFound):
		return service.Errorf(service.ErrNotFound, "task %s not found or already finished", id)
	case err != nil:
		return fmt.Errorf("%w: cannot reach the task registry: %v", service.ErrUnavailable, err)
	case owner != p.Actor() && !p.OverridesOwnership():
		return service.Errorf(service.ErrNotFound, "task %s not found", id)
	}
	// A task of this instance is stopped even when the stop cannot be
	// broadcast: no other instance runs it.
	if local, err := s.d.Tasks.Cancel(ctx, id); err != nil && !local {
		return fmt.Errorf("%w: stop could not be delivered: %v", service.ErrUnavailable, err)
	}
	return nil
}
