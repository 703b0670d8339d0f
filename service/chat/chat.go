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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
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
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HistoryMessages <= 0 {
		cfg.HistoryMessages = 16
	}
	if cfg.TopK <= 0 {
		cfg.TopK = 5
	}
	if cfg.MaxAnswerTokens <= 0 {
		cfg.MaxAnswerTokens = 4096
	}
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
	if err := s.checkReadable(ctx, p, req.KnowledgeBaseIDs); err != nil {
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

// turn is the state of one chat request.
type turn struct {
	s        *Service
	p        service.Principal
	req      Request
	emit     func(Event) error
	conv     *service.Conversation
	isNew    bool
	taskID   service.ID
	question service.Message
	answer   service.Message
	thinking strings.Builder
	content  strings.Builder
	sources  []service.Source
	// kbIDs are the knowledge bases the turn searched, recorded on its
	// messages: those it names until retrieval says what it searched.
	kbIDs []service.ID
	usage service.Usage
	// newTitle is a new conversation's title, made while the permit is
	// still held (it may be a model call).
	newTitle string
	started  time.Time
	log      *slog.Logger
	// stored records that the conversation (when new) and the question are
	// in the store: the turn got its LLM slot.
	stored bool
	// emitFailed records that the client is gone; later events go to the
	// journal only.
	emitFailed bool
	// seq numbers the turn's events (Event.ID).
	seq int
	// journal appends to the turn's journal; nil when not resumable.
	journal func(service.TaskEvent)
	// submit is the turn's submit key, written with its question; nil
	// without SubmitKey.
	submit *service.ChatSubmit
	// duplicate records that another turn under the same submit key wrote
	// its question first: this one writes nothing.
	duplicate bool
}

func (t *turn) send(name string, data any) {
	t.seq++
	e := Event{ID: t.seq, Name: name, Data: data}
	if t.journal != nil {
		t.record(e)
	}
	if t.emitFailed {
		return
	}
	if err := t.emit(e); err != nil {
		t.emitFailed = true
	}
}

// record appends e to the journal, its payload as the stream writes it.
func (t *turn) record(e Event) {
	var data []byte
	if e.Data != nil {
		var err error
		if data, err = json.Marshal(e.Data); err != nil {
			t.log.Error("an event could not be journaled", "event", e.Name, "err", err)
			return
		}
	}
	t.journal(service.TaskEvent{ID: e.ID, Name: e.Name, Data: data})
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

// begin loads the conversation (or names a new one) and reserves the ids of
// the task, the question and the answer. It writes nothing: see store. A
// submit key already stored makes it fail with *duplicateSubmit, unless that
// turn failed or was cancelled: then this one retries it in its
// conversation.
func (t *turn) begin(ctx context.Context) error {
	s := t.s
	var replaces service.ID
	if t.req.SubmitKey != "" {
		prev, err := t.retries(ctx)
		if err != nil {
			return err
		}
		if prev != nil {
			replaces = prev.MessageID
			if t.req.ConversationID == 0 {
				t.req.ConversationID = prev.ConversationID
			}
		}
	}
	if t.req.ConversationID != 0 {
		c, err := s.ownConversation(ctx, t.p, t.req.ConversationID, false)
		if err != nil {
			return err
		}
		t.conv = c
	} else {
		id, err := s.d.IDs.NextID()
		if err != nil {
			return err
		}
		t.conv = &service.Conversation{ID: id, UserID: t.p.UserID}
		t.isNew = true
	}
	ids := make([]service.ID, 3)
	for i := range ids {
		id, err := s.d.IDs.NextID()
		if err != nil {
			return err
		}
		ids[i] = id
	}
	t.taskID = ids[0]
	t.kbIDs = append([]service.ID{}, t.req.KnowledgeBaseIDs...)
	t.question = service.Message{ID: ids[1], ConversationID: t.conv.ID, Role: "user", Content: t.req.Question,
		Status: service.MessageCompleted, KnowledgeBaseIDs: t.kbIDs}
	t.answer = service.Message{ID: ids[2], ConversationID: t.conv.ID, Role: "assistant", ReplyTo: t.question.ID}
	if t.req.SubmitKey != "" {
		t.submit = &service.ChatSubmit{UserID: t.p.UserID, Key: t.req.SubmitKey, ConversationID: t.conv.ID,
			MessageID: t.question.ID, TaskID: t.taskID, Replaces: replaces}
	}
	return nil
}

// store writes a new conversation, the question and its submit key in one
// transaction, once the turn holds its LLM slot.
func (t *turn) store(ctx context.Context) error {
	if t.req.Ephemeral {
		t.stored = true
		return nil
	}
	var conv *service.Conversation
	if t.isNew {
		conv = t.conv
	}
	if err := t.s.d.Store.SaveQuestion(ctx, conv, &t.question, t.submit); err != nil {
		if errors.Is(err, service.ErrDuplicateRequest) {
			t.duplicate = true
		}
		return err
	}
	t.stored = true
	return nil
}

// run is the pipeline after meta. Whatever happens, it ends with finish and
// done and the answer saved.
func (t *turn) run(ctx context.Context) {
	s := t.s
	status, errEvent := t.generate(ctx)
	var title string
	switch {
	case status == service.MessageCancelled:
		t.send(EventCancel, Cancel{Reason: cancelReason(ctx)})
	case errEvent != nil:
		t.send(EventError, errEvent)
	}
	switch {
	case !t.isNew || status == service.MessageRejected:
		// A rejected request makes no model call, not even for a title.
	case status == service.MessageCompleted:
		title = t.newTitle
	default:
		// Cancelled or failed: name it after the question, no model call.
		title = excerpt(t.req.Question, 30)
	}
	t.answer.Status = status
	t.answer.Content = t.content.String()
	t.answer.Thinking = t.thinking.String()
	t.answer.Usage = t.usage
	t.answer.LatencyMS = s.cfg.Now().Sub(t.started).Milliseconds()
	t.answer.KnowledgeBaseIDs = t.kbIDs
	if len(t.sources) > 0 {
		t.answer.Sources, _ = json.Marshal(t.sources)
	}
	// Saved even when the client is gone or the server is stopping.
	saveCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	saved := true
	switch {
	case t.req.Ephemeral:
		saved, title = false, ""
	case t.stored:
		if err := s.d.Store.SaveMessage(saveCtx, &t.answer, title); err != nil {
			t.log.ErrorContext(ctx, "saving the answer failed", "err", err)
		}
	case t.isNew, t.duplicate:
		// No slot, no conversation: a refused first question leaves nothing;
		// nor does a duplicate of a turn already stored.
		saved, title = false, ""
	default:
		// No slot in an existing conversation: keep the question, marked with
		// the turn's status (history leaves rejected ones out), no answer.
		t.question.Status = status
		if err := s.d.Store.SaveMessage(saveCtx, &t.question, ""); err != nil {
			t.log.ErrorContext(ctx, "saving the question failed", "err", err)
		}
	}
	finish := Finish{MessageID: t.answer.ID, Status: status, Title: title}
	if !saved {
		finish.Saved = &saved
	}
	if t.usage.TotalTokens > 0 {
		finish.Usage = &t.usage
	}
	t.send(EventFinish, finish)
	t.send(EventDone, nil)
}

// generate waits for an LLM slot, then runs the pipeline and streams the
// answer. It returns the terminal status and, for failures, the error event.
// Every model call of the turn — rewrite, intent scoring, the answer and a
// new conversation's title — runs while the permit is held, so the model
// never sees more than the queue's N calls at once from ragent.
func (t *turn) generate(ctx context.Context) (service.MessageStatus, *Error) {
	s := t.s
	if s.d.Limiter != nil {
		last := -1
		qctx, wait := s.span(ctx, "chat.queue_wait")
		release, err := s.d.Limiter.Acquire(qctx, t.taskID.String(), t.p.Actor(), func(position, queued int) {
			if position != last {
				last = position
				t.send(EventQueue, Queue{Position: position, Queued: queued, Waiting: service.WaitSlot})
			}
		})
		wait.End()
		switch {
		case err == nil:
			defer release()
		case ctx.Err() != nil:
			return service.MessageCancelled, nil
		case errors.Is(err, service.ErrBusy), errors.Is(err, service.ErrUnavailable):
			msg := BusyMessage
			if !errors.Is(err, service.ErrBusy) {
				msg = "排队服务暂不可用，请稍后再试 (the queue is unavailable)"
			}
			t.content.WriteString(msg)
			reject := Reject{Code: service.CodeOf(err), Message: msg}
			var de *service.Error
			if errors.As(err, &de) && de.RetryAfter > 0 {
				reject.RetryAfter = int(math.Ceil(de.RetryAfter.Seconds()))
			}
			t.send(EventReject, reject)
			return service.MessageRejected, nil
		default:
			t.log.ErrorContext(ctx, "limiter failed", "err", err)
			return service.MessageFailed, &Error{Code: service.CodeOf(err), Message: "the request could not be queued"}
		}
	}

	// The turn's model calls wait for their endpoint's budget, if one is
	// set, and say so in queue events.
	var lastWait service.QueueWait
	ctx = service.WithQueueReport(ctx, func(w service.QueueWait) {
		if w != lastWait {
			lastWait = w
			t.send(EventQueue, Queue{Position: w.Position, Queued: w.Queued, Waiting: w.For})
		}
	})
	if err := t.store(ctx); err != nil {
		if ctx.Err() != nil {
			return service.MessageCancelled, nil
		}
		if t.duplicate {
			// Two submits with one key passed the Redis lock (lost in a
			// failover) at once; the other wrote first and answers.
			t.log.WarnContext(ctx, "a duplicate submit reached the database's unique key", "key", t.req.SubmitKey)
			return service.MessageFailed, &Error{Code: service.CodeOf(err),
				Message: "an identical request with this Idempotency-Key is already being answered; resubmit it to follow that answer"}
		}
		t.log.ErrorContext(ctx, "saving the question failed", "err", err)
		return service.MessageFailed, &Error{Code: service.CodeOf(err), Message: "the question could not be saved"}
	}
	status, errEvent := t.answerTurn(ctx)
	if status == service.MessageCompleted && t.isNew && !t.req.Ephemeral {
		tctx, span := s.span(ctx, "chat.title")
		t.newTitle = t.title(tctx)
		span.End()
	}
	return status, errEvent
}

// answerTurn runs the pipeline under the permit and streams the answer.
func (t *turn) answerTurn(ctx context.Context) (service.MessageStatus, *Error) {
	prompt, err := t.prepare(ctx)
	if err == nil && prompt == nil {
		return service.MessageCompleted, nil // answered without the model
	}
	if err == nil {
		err = t.stream(ctx, prompt)
	}
	switch {
	case err == nil:
		return service.MessageCompleted, nil
	case ctx.Err() != nil:
		return service.MessageCancelled, nil
	case errors.Is(err, service.ErrNotFound):
		return service.MessageFailed, &Error{Code: service.CodeOf(err), Message: err.Error()}
	case errors.Is(err, service.ErrUnavailable):
		t.log.WarnContext(ctx, "model unavailable", "err", err)
		err = fmt.Errorf("%w: %w", service.ErrModelUnavailable, err)
		return service.MessageFailed, &Error{Code: service.CodeOf(err), Message: "模型服务暂不可用，请稍后再试 (the model is unavailable)"}
	default:
		t.log.ErrorContext(ctx, "chat failed", "err", err)
		return service.MessageFailed, &Error{Code: service.CodeOf(err), Message: "生成回答时出错 (the answer could not be generated)"}
	}
}

func (t *turn) stream(ctx context.Context, req *service.ChatRequest) error {
	ctx, span := t.s.span(ctx, "chat.answer")
	defer span.End()
	usage, err := t.s.d.Model.Stream(t.call(ctx, service.UsageAnswer), *req, func(d service.Delta) error {
		if d.Text == "" {
			return nil
		}
		kind := "response"
		if d.Kind == service.DeltaThink {
			if !t.req.DeepThinking {
				return nil
			}
			kind = "think"
			t.thinking.WriteString(d.Text)
		} else {
			t.content.WriteString(d.Text)
		}
		t.send(EventMessage, Message{Type: kind, Delta: d.Text})
		return nil
	})
	t.usage = usage
	return err
}

// call names the turn's model call of kind for usage records: one id per
// kind and task, so it is recorded once however often the call is tried;
// it is spent for the knowledge base the turn searched, when just one.
func (t *turn) call(ctx context.Context, kind service.UsageKind) context.Context {
	scope := service.UsageScopeFrom(ctx)
	if len(t.kbIDs) == 1 {
		scope.KnowledgeBaseID = t.kbIDs[0]
	}
	ctx = service.WithUsageScope(ctx, scope)
	return service.WithUsageCall(ctx, service.UsageCall{Kind: kind, ID: "task:" + t.taskID.String() + ":" + string(kind)})
}

// cancelReason tells a user's stop from a disconnect and a shutdown.
func cancelReason(ctx context.Context) string {
	switch cause := context.Cause(ctx); {
	case errors.Is(cause, service.ErrStopped):
		return ReasonUser
	case errors.Is(cause, service.ErrShutdown):
		return ReasonShutdown
	default:
		return ReasonDisconnect
	}
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
