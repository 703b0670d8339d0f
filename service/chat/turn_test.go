package chat

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/retrieve"
)

// The fakes below stand in for the turn's collaborators, so each outcome of
// turn.generate and turn.run can be forced and its status, events and
// stored rows checked without a database, a queue or a model.

type fakeStore struct {
	Store // only the methods a turn calls are implemented
	mu    sync.Mutex
	conv  *service.Conversation // an existing conversation, when set
	fail  error                 // SaveMessage of the question fails with it
	convs []service.ID
	saved []service.Message
	title string
}

func (f *fakeStore) Conversation(_ context.Context, id service.ID) (*service.Conversation, error) {
	if f.conv != nil && f.conv.ID == id {
		return f.conv, nil
	}
	return nil, service.ErrNotFound
}

func (f *fakeStore) SaveQuestion(ctx context.Context, c *service.Conversation, q *service.Message, _ *service.ChatSubmit) error {
	f.mu.Lock()
	if f.fail != nil {
		f.mu.Unlock()
		return f.fail
	}
	if c != nil {
		f.convs = append(f.convs, c.ID)
	}
	f.mu.Unlock()
	return f.SaveMessage(ctx, q, "")
}

func (f *fakeStore) SaveMessage(_ context.Context, m *service.Message, title string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil && m.Role == "user" {
		return f.fail
	}
	f.saved = append(f.saved, *m)
	if title != "" {
		f.title = title
	}
	return nil
}

func (f *fakeStore) RecentMessages(context.Context, service.ID, int) ([]service.Message, error) {
	return nil, nil
}

// fakeTasks keeps the registered cancel function, so a test can stop the task
// the way stream.Manager does.
type fakeTasks struct {
	Tasks
	cancel context.CancelCauseFunc
}

func (f *fakeTasks) Register(_ context.Context, _, _ string, cancel context.CancelCauseFunc) (func(), error) {
	f.cancel = cancel
	return func() {}, nil
}

func (f *fakeTasks) stop() { f.cancel(fmt.Errorf("stop: %w", service.ErrStopped)) }

type limiterFunc func(ctx context.Context) error

func (l limiterFunc) Acquire(ctx context.Context, _, _ string, onPosition func(int, int)) (func(), error) {
	onPosition(1, 1)
	if err := l(ctx); err != nil {
		return nil, err
	}
	return func() {}, nil
}

type retrieverFunc func() ([]service.SearchResult, error)

func (r retrieverFunc) Run(context.Context, service.Principal, retrieve.Query) (retrieve.Result, error) {
	results, err := r()
	return retrieve.Result{Results: results}, err
}

type modelFunc func(ctx context.Context, onDelta func(service.Delta) error) error

func (m modelFunc) Stream(ctx context.Context, _ service.ChatRequest, onDelta func(service.Delta) error) (service.Usage, error) {
	return service.Usage{}, m(ctx, onDelta)
}

type seqIDs struct{ n service.ID }

func (s *seqIDs) NextID() (service.ID, error) { s.n++; return s.n, nil }

func TestTurnOutcomes(t *testing.T) {
	const question = "How do I reset the VPN token?"
	const existing = service.ID(1000)
	oneSource := func() ([]service.SearchResult, error) {
		return []service.SearchResult{{DocumentID: 5, DocumentName: "vpn.md", Content: "Reset it in the portal."}}, nil
	}
	answer := func(_ context.Context, onDelta func(service.Delta) error) error {
		return onDelta(service.Delta{Kind: service.DeltaResponse, Text: "Use the portal."})
	}
	granted := func(context.Context) error { return nil }
	queuedUntilEnd := func(*fakeTasks) limiterFunc {
		return func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	}

	tests := []struct {
		name      string
		existing  bool // ask in an existing conversation
		refuse    bool // RefuseWithoutSources
		limiter   func(*fakeTasks) limiterFunc
		retrieve  retrieverFunc
		model     func(*fakeTasks) modelFunc
		saveFails error
		// parent ends the request's own context with this cause (a
		// disconnect or shutdown) while the turn waits in the queue.
		parent error

		status  service.MessageStatus
		events  []string
		payload any    // the reject, cancel or error event's data
		answer  string // stored answer content; "" when no answer is stored
		qStatus service.MessageStatus
		saved   bool // finish.saved (absent means true)
	}{
		{
			name: "completed", limiter: func(*fakeTasks) limiterFunc { return granted }, retrieve: oneSource,
			model:  func(*fakeTasks) modelFunc { return answer },
			status: service.MessageCompleted, events: []string{"meta", "queue", "sources", "message", "finish", "done"},
			answer: "Use the portal.", qStatus: service.MessageCompleted, saved: true,
		},
		{
			name: "refused without sources", refuse: true, limiter: func(*fakeTasks) limiterFunc { return granted },
			retrieve: func() ([]service.SearchResult, error) { return nil, nil },
			model: func(*fakeTasks) modelFunc {
				return func(context.Context, func(service.Delta) error) error { return errors.New("the model was called") }
			},
			status: service.MessageCompleted, events: []string{"meta", "queue", "sources", "message", "finish", "done"},
			answer: NoSourcesAnswer, qStatus: service.MessageCompleted, saved: true,
		},
		{
			name:    "busy, new conversation",
			limiter: func(*fakeTasks) limiterFunc { return func(context.Context) error { return service.ErrBusy } },
			status:  service.MessageRejected, events: []string{"meta", "queue", "reject", "finish", "done"},
			payload: Reject{Code: "busy", Message: BusyMessage}, saved: false,
		},
		{
			name: "queue unavailable, existing conversation", existing: true,
			limiter: func(*fakeTasks) limiterFunc { return func(context.Context) error { return service.ErrUnavailable } },
			status:  service.MessageRejected, events: []string{"meta", "queue", "reject", "finish", "done"},
			payload: Reject{Code: "unavailable", Message: "排队服务暂不可用，请稍后再试 (the queue is unavailable)"},
			qStatus: service.MessageRejected, saved: true,
		},
		{
			name:    "limiter broken",
			limiter: func(*fakeTasks) limiterFunc { return func(context.Context) error { return errors.New("boom") } },
			status:  service.MessageFailed, events: []string{"meta", "queue", "error", "finish", "done"},
			payload: &Error{Code: service.CodeInternal, Message: "the request could not be queued"}, saved: false,
		},
		{
			name: "stopped while queued", existing: true,
			limiter: func(tasks *fakeTasks) limiterFunc {
				return func(ctx context.Context) error { tasks.stop(); <-ctx.Done(); return ctx.Err() }
			},
			status: service.MessageCancelled, events: []string{"meta", "queue", "cancel", "finish", "done"},
			payload: Cancel{Reason: ReasonUser}, qStatus: service.MessageCancelled, saved: true,
		},
		{
			name: "client left while queued", limiter: queuedUntilEnd, parent: context.Canceled,
			status: service.MessageCancelled, events: []string{"meta", "queue", "cancel", "finish", "done"},
			payload: Cancel{Reason: ReasonDisconnect}, saved: false,
		},
		{
			name: "shutdown while queued", limiter: queuedUntilEnd, parent: service.ErrShutdown,
			status: service.MessageCancelled, events: []string{"meta", "queue", "cancel", "finish", "done"},
			payload: Cancel{Reason: ReasonShutdown}, saved: false,
		},
		{
			name: "question not saved", limiter: func(*fakeTasks) limiterFunc { return granted },
			saveFails: errors.New("disk full"),
			status:    service.MessageFailed, events: []string{"meta", "queue", "error", "finish", "done"},
			payload: &Error{Code: service.CodeInternal, Message: "the question could not be saved"}, saved: false,
		},
		{
			name: "knowledge base gone", limiter: func(*fakeTasks) limiterFunc { return granted },
			retrieve: func() ([]service.SearchResult, error) {
				return nil, service.Errorf(service.ErrNotFound, "kb 9 not found")
			},
			status: service.MessageFailed, events: []string{"meta", "queue", "error", "finish", "done"},
			payload: &Error{Code: "not_found", Message: "retrieve: kb 9 not found"}, qStatus: service.MessageCompleted, saved: true,
		},
		{
			name: "model unavailable", limiter: func(*fakeTasks) limiterFunc { return granted }, retrieve: oneSource,
			model: func(*fakeTasks) modelFunc {
				return func(context.Context, func(service.Delta) error) error { return service.ErrUnavailable }
			},
			status: service.MessageFailed, events: []string{"meta", "queue", "sources", "error", "finish", "done"},
			payload: &Error{Code: "llm_unavailable", Message: "模型服务暂不可用，请稍后再试 (the model is unavailable)"},
			qStatus: service.MessageCompleted, saved: true,
		},
		{
			name: "model failed", limiter: func(*fakeTasks) limiterFunc { return granted }, retrieve: oneSource,
			model: func(*fakeTasks) modelFunc {
				return func(context.Context, func(service.Delta) error) error { return errors.New("bad gateway") }
			},
			status: service.MessageFailed, events: []string{"meta", "queue", "sources", "error", "finish", "done"},
			payload: &Error{Code: service.CodeInternal, Message: "生成回答时出错 (the answer could not be generated)"},
			qStatus: service.MessageCompleted, saved: true,
		},
		{
			name: "stopped while answering", limiter: func(*fakeTasks) limiterFunc { return granted }, retrieve: oneSource,
			model: func(tasks *fakeTasks) modelFunc {
				return func(ctx context.Context, onDelta func(service.Delta) error) error {
					onDelta(service.Delta{Kind: service.DeltaResponse, Text: "Use the"})
					tasks.stop()
					<-ctx.Done()
					return ctx.Err()
				}
			},
			status: service.MessageCancelled, events: []string{"meta", "queue", "sources", "message", "cancel", "finish", "done"},
			payload: Cancel{Reason: ReasonUser}, answer: "Use the", qStatus: service.MessageCompleted, saved: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := service.Principal{UserID: 7, Role: service.RoleUser}
			store := &fakeStore{fail: tt.saveFails}
			tasks := &fakeTasks{}
			req := Request{Question: question}
			if tt.existing {
				store.conv = &service.Conversation{ID: existing, UserID: p.UserID}
				req.ConversationID = existing
			}
			d := Deps{Store: store, Tasks: tasks, Limiter: tt.limiter(tasks), Retriever: tt.retrieve, IDs: &seqIDs{}}
			if tt.model != nil {
				d.Model = tt.model(tasks)
			}
			s := New(d, Config{RefuseWithoutSources: tt.refuse})

			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			var events []Event
			err := s.Chat(ctx, p, req, func(e Event) error {
				events = append(events, e)
				if e.Name == EventQueue && tt.parent != nil {
					cancel(tt.parent)
				}
				return nil
			})
			if err != nil {
				t.Fatalf("Chat: %v", err)
			}

			var names []string
			var finish Finish
			for _, e := range events {
				names = append(names, e.Name)
				switch e.Name {
				case EventReject, EventCancel, EventError:
					if fmt.Sprint(e.Data) != fmt.Sprint(tt.payload) {
						t.Errorf("%s event %+v, want %+v", e.Name, e.Data, tt.payload)
					}
				case EventFinish:
					finish = e.Data.(Finish)
				}
			}
			if !slices.Equal(names, tt.events) {
				t.Errorf("events %v, want %v", names, tt.events)
			}
			if finish.Status != tt.status {
				t.Errorf("finish status %q, want %q", finish.Status, tt.status)
			}
			if saved := finish.Saved == nil || *finish.Saved; saved != tt.saved {
				t.Errorf("finish saved %v, want %v", saved, tt.saved)
			}

			// What the store holds: the question with its status, the answer
			// with the turn's, and a new conversation only with a slot.
			var q, a *service.Message
			for i, m := range store.saved {
				if m.Role == "user" {
					q = &store.saved[i]
				} else {
					a = &store.saved[i]
				}
			}
			switch {
			case tt.qStatus == "" && q != nil:
				t.Errorf("question stored (%s), want nothing", q.Status)
			case tt.qStatus != "" && (q == nil || q.Status != tt.qStatus):
				t.Errorf("question stored as %+v, want status %q", q, tt.qStatus)
			}
			wantAnswer := tt.answer != "" || (tt.qStatus != "" && !(tt.existing && tt.qStatus != service.MessageCompleted))
			switch {
			case !wantAnswer && a != nil:
				t.Errorf("answer stored (%s %q), want none", a.Status, a.Content)
			case wantAnswer && (a == nil || a.Status != tt.status || a.Content != tt.answer):
				t.Errorf("answer stored as %+v, want %q %q", a, tt.status, tt.answer)
			}
			// (The conversation and the question are one transaction: a
			// failing question save leaves no conversation either.)
			if created := len(store.convs) > 0; created != (!tt.existing && q != nil) {
				t.Errorf("conversation created: %v, want it only for a new one that got a slot", created)
			}
			if tt.status == service.MessageCompleted && !tt.existing && store.title == "" {
				t.Error("a completed first answer left the conversation untitled")
			}
		})
	}
}

// historyStore is a conversation that a limited key could read when its
// turn began, and whose owner has since added a turn over another
// knowledge base.
type historyStore struct {
	*fakeStore
	recent []service.Message
}

func (h *historyStore) ConversationWithin(context.Context, service.ID, []service.ID) (bool, error) {
	return true, nil
}

func (h *historyStore) RecentMessages(context.Context, service.ID, int) ([]service.Message, error) {
	return h.recent, nil
}

// TestLimitedKeyTurnRechecksHistory: the history a limited key's turn hands
// the model is checked message by message, so a turn its owner added over
// another knowledge base while the key's turn began fails it (not_found)
// without reaching the model; within the list, the turn runs.
func TestLimitedKeyTurnRechecksHistory(t *testing.T) {
	const conv = service.ID(1000)
	key := service.Principal{UserID: 7, Role: service.RoleUser,
		Key: &service.KeyGrant{KeyID: 3, Scopes: []service.Scope{service.ScopeChat}, KnowledgeBaseIDs: []service.ID{1}}}
	for _, tt := range []struct {
		name    string
		kbs     []service.ID // the owner's earlier turn searched these
		status  service.MessageStatus
		prompts int
	}{
		{"outside the list", []service.ID{1, 2}, service.MessageFailed, 0},
		{"unknown", nil, service.MessageFailed, 0},
		{"within the list", []service.ID{1}, service.MessageCompleted, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := &historyStore{fakeStore: &fakeStore{conv: &service.Conversation{ID: conv, UserID: 7}}, recent: []service.Message{
				{ID: 1, ConversationID: conv, Role: "user", Content: "What is the merger?", Status: service.MessageCompleted, KnowledgeBaseIDs: tt.kbs},
				{ID: 2, ConversationID: conv, Role: "assistant", Content: "The okapi merger.", Status: service.MessageCompleted, KnowledgeBaseIDs: tt.kbs},
			}}
			prompts := 0
			model := modelFunc(func(_ context.Context, onDelta func(service.Delta) error) error {
				prompts++
				return onDelta(service.Delta{Kind: service.DeltaResponse, Text: "ok"})
			})
			s := New(Deps{Store: store, Tasks: &fakeTasks{}, Retriever: retrieverFunc(func() ([]service.SearchResult, error) { return nil, nil }),
				Model: model, IDs: &seqIDs{n: 2000}}, Config{})
			var finish Finish
			var errEvent any
			err := s.Chat(context.Background(), key, Request{Question: "And then?", ConversationID: conv}, func(e Event) error {
				switch e.Name {
				case EventFinish:
					finish = e.Data.(Finish)
				case EventError:
					errEvent = e.Data
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if finish.Status != tt.status || prompts != tt.prompts {
				t.Fatalf("finish %q after %d model calls (error %+v), want %q after %d", finish.Status, prompts, errEvent, tt.status, tt.prompts)
			}
			if tt.status == service.MessageFailed && fmt.Sprint(errEvent) != fmt.Sprint(&Error{Code: "not_found", Message: "conversation 1000 not found"}) {
				t.Fatalf("error event %+v", errEvent)
			}
		})
	}
}
