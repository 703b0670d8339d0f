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

	"github.com/ragent-go/ragent/service"
)

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
	t.question = service.Message{ID: ids[1], ConversationID: t.conv.ID, Role: service.ChatUser, Content: t.req.Question,
		Status: service.MessageCompleted, KnowledgeBaseIDs: t.kbIDs}
	t.answer = service.Message{ID: ids[2], ConversationID: t.conv.ID, Role: service.ChatAssistant, ReplyTo: t.question.ID}
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
	t.answer.Sources = t.sources
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
		kind := service.DeltaResponse
		if d.Kind == service.DeltaThink {
			if !t.req.DeepThinking {
				return nil
			}
			kind = service.DeltaThink
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
