package chat

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ragent-go/ragent/service"
)

// errDetachedTimeout is the cancel cause of a resumable turn whose client
// stayed away for Config.DetachedTimeout (reason "disconnect").
var errDetachedTimeout = errors.New("the client went away and did not come back in time")

// detach makes the end of the request (ctx) end the task (cancel) as the
// turn's kind asks: a shutdown at once; a client gone at once, or for a
// resumable turn after DetachedTimeout, so the client can resume meanwhile.
// The process's shutdown (service.Shutdown) cancels a detached task too.
// The returned stop undoes all of it; the task's own end calls it.
func (s *Service) detach(ctx context.Context, resumable bool, cancel context.CancelCauseFunc) (stop func()) {
	var (
		mu    sync.Mutex
		timer *time.Timer
	)
	stopClient := context.AfterFunc(ctx, func() {
		cause := context.Cause(ctx)
		if !resumable || s.cfg.DetachedTimeout <= 0 || errors.Is(cause, service.ErrShutdown) {
			cancel(cause)
			return
		}
		mu.Lock()
		timer = time.AfterFunc(s.cfg.DetachedTimeout, func() { cancel(errDetachedTimeout) })
		mu.Unlock()
	})
	shutdown := service.Shutdown(ctx)
	stopShutdown := context.AfterFunc(shutdown, func() { cancel(context.Cause(shutdown)) })
	return func() {
		stopClient()
		stopShutdown()
		mu.Lock()
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
	}
}

// readerScope is what a resumed stream of the turn may show: the knowledge
// bases the turn names, else those its API key is limited to, else nil
// (any its owner reads), so a key limited to some knowledge bases resumes
// only turns that stayed within them (KeyGrant.Within).
func (t *turn) readerScope() []service.ID {
	if len(t.req.KnowledgeBaseIDs) > 0 {
		return t.req.KnowledgeBaseIDs
	}
	return t.p.Key.HistoryLimit()
}

// Events replays the events of a resumable task numbered after after
// (a client's Last-Event-ID), then follows the live ones until done, on any
// instance. Only the task's owner reads them, through a session or an API
// key that reaches the turn's knowledge bases; for anyone else, and once
// they expired, the task is not found. A task whose events after after are
// no longer kept fails with service.ErrConflict before anything is emitted.
func (s *Service) Events(ctx context.Context, p service.Principal, taskID service.ID, after int, emit func(Event) error) error {
	id := taskID.String()
	notFound := service.Errorf(service.ErrNotFound, "task %s not found, not resumable, or its events expired", id)
	if after < 0 {
		return service.Errorf(service.ErrInvalid, "Last-Event-ID must be a non-negative event id")
	}
	if s.d.Journal == nil {
		return notFound
	}
	reader, err := s.d.Journal.Reader(ctx, id)
	switch {
	case errors.Is(err, service.ErrNotFound):
		return notFound
	case err != nil:
		return fmt.Errorf("%w: cannot reach the task journal: %v", service.ErrUnavailable, err)
	case reader.Owner != p.UserID || reader.Visitor != p.Visitor || !p.Key.Within(reader.KnowledgeBaseIDs):
		return notFound
	}
	err = s.d.Journal.Follow(ctx, id, after, EventDone, func(e service.TaskEvent) error {
		var data any
		if e.Name != EventDone {
			data = json.RawMessage(e.Data)
		}
		return emit(Event{ID: e.ID, Name: e.Name, Data: data})
	})
	switch {
	case errors.Is(err, service.ErrConflict):
		return service.Errorf(service.ErrConflict, "the events after %d of task %s are no longer kept; read the saved answer from the conversation", after, id)
	case errors.Is(err, service.ErrNotFound):
		return notFound
	}
	return err
}
