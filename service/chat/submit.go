package chat

import (
	"context"
	"errors"

	"github.com/ragent-go/ragent/service"
)

// duplicateSubmit is begin's answer to a submit key whose turn is stored
// and answered (or still running): the request is that turn again.
type duplicateSubmit struct{ sub *service.ChatSubmit }

func (d *duplicateSubmit) Error() string { return "chat: the submit key names a stored turn" }

// retries decides what a request with a submit key is: a first submit (nil),
// a retry of a failed or cancelled turn under the key (that turn's submit,
// whose conversation the retry continues), or the same turn again
// (*duplicateSubmit). A turn with no saved answer whose task runs nowhere
// died with its instance, and is retried too.
func (t *turn) retries(ctx context.Context) (*service.ChatSubmit, error) {
	s := t.s
	prev, err := s.d.Store.ChatSubmit(ctx, t.p.UserID, t.req.SubmitKey)
	switch {
	case errors.Is(err, service.ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, err
	}
	switch prev.AnswerStatus {
	case service.MessageFailed, service.MessageCancelled:
		return prev, nil
	case "":
		_, err := s.d.Tasks.Owner(ctx, prev.TaskID.String())
		if errors.Is(err, service.ErrNotFound) {
			return prev, nil
		}
	}
	return nil, &duplicateSubmit{sub: prev}
}

// followSubmit answers a duplicate submit with the original turn: its
// events from the journal (replayed from meta, then live until done), or,
// once those are gone, ErrDuplicateRequest naming the conversation and the
// message that hold the answer. Like Chat, it returns an error only when
// nothing was emitted.
func (s *Service) followSubmit(ctx context.Context, p service.Principal, sub *service.ChatSubmit, emit func(Event) error) error {
	started := false
	err := s.Events(ctx, p, sub.TaskID, 0, func(e Event) error {
		started = true
		return emit(e)
	})
	switch {
	case err == nil, ctx.Err() != nil:
		return nil
	case started:
		_ = emit(Event{Name: EventError, Data: Error{Code: service.CodeOf(err),
			Message: "the stream of this answer ended early; read the saved answer from the conversation"}})
		return nil
	case errors.Is(err, service.ErrNotFound), errors.Is(err, service.ErrConflict):
		return service.WithDetails(service.ErrDuplicateRequest,
			"this Idempotency-Key was already submitted; its answer is in the conversation",
			map[string]string{"conversationId": sub.ConversationID.String(), "messageId": sub.MessageID.String(),
				"taskId": sub.TaskID.String()})
	}
	return err
}
