package repository

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

// Submits racing under one key (a Redis submit lock lost in a failover
// let them all through) write one conversation and one question; the
// others fail with ErrDuplicateRequest and write nothing. A retry of a
// failed turn moves the key once, however many retries race.
func TestSaveQuestionSubmitKey(t *testing.T) {
	s, ctx := migrated(t)
	user := seedUser(t, s, "u")
	const key = "req-1"
	race := func(n int, write func(i int) error) (wins int, dups int) {
		t.Helper()
		var (
			wg sync.WaitGroup
			mu sync.Mutex
		)
		for i := range n {
			wg.Go(func() {
				err := write(i)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					wins++
				case errors.Is(err, service.ErrDuplicateRequest):
					dups++
				default:
					t.Errorf("save %d: %v", i, err)
				}
			})
		}
		wg.Wait()
		return wins, dups
	}
	count := func(q string) int {
		t.Helper()
		var n int
		if err := s.db.Raw(q).Scan(&n).Error; err != nil {
			t.Fatal(err)
		}
		return n
	}

	var mu sync.Mutex
	questions := map[int]service.Message{}
	wins, dups := race(8, func(i int) error {
		conv := &service.Conversation{ID: newID(), UserID: user.ID}
		q := service.Message{ID: newID(), ConversationID: conv.ID, Role: "user", Content: "hello", Status: service.MessageCompleted}
		mu.Lock()
		questions[i] = q
		mu.Unlock()
		return s.SaveQuestion(ctx, conv, &q, &service.ChatSubmit{UserID: user.ID, Key: key, ConversationID: conv.ID, MessageID: q.ID, TaskID: newID()})
	})
	if wins != 1 || dups != 7 {
		t.Fatalf("%d writes won, %d were duplicates; want 1 and 7", wins, dups)
	}
	if c, m := count("SELECT count(*) FROM conversations"), count("SELECT count(*) FROM messages"); c != 1 || m != 1 {
		t.Fatalf("%d conversations and %d messages, want one each", c, m)
	}
	sub, err := s.ChatSubmit(ctx, user.ID, key)
	if err != nil || sub.AnswerStatus != "" {
		t.Fatalf("submit %+v, %v; want one without an answer", sub, err)
	}
	if _, err := s.ChatSubmit(ctx, user.ID, "another"); !errors.Is(err, service.ErrNotFound) {
		t.Fatalf("an unknown key: %v", err)
	}
	answer := service.Message{ID: newID(), ConversationID: sub.ConversationID, Role: "assistant", Status: service.MessageFailed, ReplyTo: sub.MessageID}
	if err := s.SaveMessage(ctx, &answer, ""); err != nil {
		t.Fatal(err)
	}
	if sub, err = s.ChatSubmit(ctx, user.ID, key); err != nil || sub.AnswerStatus != service.MessageFailed {
		t.Fatalf("submit %+v, %v; want its answer failed", sub, err)
	}

	// Retries of the failed turn in its conversation: one moves the key.
	wins, dups = race(4, func(int) error {
		q := service.Message{ID: newID(), ConversationID: sub.ConversationID, Role: "user", Content: "hello", Status: service.MessageCompleted}
		return s.SaveQuestion(ctx, nil, &q, &service.ChatSubmit{UserID: user.ID, Key: key, ConversationID: sub.ConversationID,
			MessageID: q.ID, TaskID: newID(), Replaces: sub.MessageID})
	})
	if wins != 1 || dups != 3 {
		t.Fatalf("retries: %d won, %d duplicates; want 1 and 3", wins, dups)
	}
	moved, err := s.ChatSubmit(ctx, user.ID, key)
	if err != nil || moved.MessageID == sub.MessageID || moved.ConversationID != sub.ConversationID || moved.AnswerStatus != "" {
		t.Fatalf("after the retry: %+v, %v", moved, err)
	}
	if c, m := count("SELECT count(*) FROM conversations"), count("SELECT count(*) FROM messages WHERE role = 'user'"); c != 1 || m != 2 {
		t.Fatalf("%d conversations and %d questions, want 1 and 2", c, m)
	}

	// The key is the user's: another user's same key is another turn.
	other := seedUser(t, s, "v")
	conv := &service.Conversation{ID: newID(), UserID: other.ID}
	q := service.Message{ID: newID(), ConversationID: conv.ID, Role: "user", Content: "hi", Status: service.MessageCompleted}
	if err := s.SaveQuestion(ctx, conv, &q, &service.ChatSubmit{UserID: other.ID, Key: key, ConversationID: conv.ID, MessageID: q.ID, TaskID: newID()}); err != nil {
		t.Fatalf("another user's key: %v", err)
	}
}

// CheckSent makes unsent again the ingest rows whose message the MQ lost
// while their document waits, re-asks about held ones only after cutoff,
// confirms the rows whose document moved on, and keeps what it decided
// when the MQ stops answering midway.
func TestCheckSent(t *testing.T) {
	s, ctx := migrated(t)
	kb := seedKB(t, s, 4)
	docs := []*service.Document{seedDoc(t, s, kb, "a"), seedDoc(t, s, kb, "b"), seedDoc(t, s, kb, "c"), seedDoc(t, s, kb, "d")}
	refs := map[string]string{} // outbox key → ref
	sent, _, err := s.RelayIngest(ctx, 100, 10, func(_ context.Context, m service.OutboxMessage) (string, error) {
		refs[m.Key] = "ref-" + m.Key
		return refs[m.Key], nil
	})
	if err != nil || sent != len(docs) {
		t.Fatalf("relay: %d, %v", sent, err)
	}
	key := func(d *service.Document) string { return d.ID.String() + ":1" }
	if err := s.db.Exec("UPDATE documents SET status = 'ready' WHERE id = ?", int64(docs[3].ID)).Error; err != nil {
		t.Fatal(err)
	}
	lost := refs[key(docs[1])]
	asked := map[string]int{}
	holds := func(_ context.Context, ref string) (bool, error) {
		asked[ref]++
		return ref != lost, nil
	}
	later := time.Now().Add(time.Hour) // everything was sent and checked before it
	resent, err := s.CheckSent(ctx, later, 10, holds)
	if err != nil || resent != 1 {
		t.Fatalf("check: resent %d, %v; want 1", resent, err)
	}
	if asked[refs[key(docs[3])]] != 0 || len(asked) != 3 {
		t.Fatalf("asked %v: want the three waiting documents' messages, not the ready one's", asked)
	}
	var row struct {
		SentAt   *time.Time
		SentRef  string
		Attempts int
	}
	if err := s.db.Raw("SELECT sent_at, sent_ref, attempts FROM outbox WHERE key = ?", key(docs[1])).Scan(&row).Error; err != nil {
		t.Fatal(err)
	}
	if row.SentAt != nil || row.SentRef != "" || row.Attempts != 1 {
		t.Fatalf("the lost row: %+v, want unsent with one attempt", row)
	}
	if confirmed := outboxRows(t, s, "confirmed_at IS NOT NULL"); confirmed != 1 {
		t.Fatalf("%d rows confirmed, want the ready document's", confirmed)
	}
	// Checked just now: not asked again before the next cutoff.
	asked = map[string]int{}
	if _, err := s.CheckSent(ctx, time.Now().Add(-time.Minute), 10, holds); err != nil || len(asked) != 0 {
		t.Fatalf("asked %v (%v) before the next cutoff", asked, err)
	}
	// The MQ answers "lost" once, then stops answering: that loss is kept.
	n := 0
	down := errors.New("mq down")
	resent, err = s.CheckSent(ctx, later, 10, func(_ context.Context, ref string) (bool, error) {
		if n++; n > 1 {
			return false, down
		}
		return false, nil
	})
	if !errors.Is(err, down) || resent != 1 {
		t.Fatalf("check with the MQ going down: resent %d, %v", resent, err)
	}
	if unsent := outboxRows(t, s, "sent_at IS NULL"); unsent != 2 {
		t.Fatalf("%d unsent rows, want 2 (the loss decided before the MQ went down stays)", unsent)
	}
}

// The Auditor's hourly turn, given the chat submit keys' retention as
// cmd/ragent wires it, deletes the keys stored before the window and keeps
// the others, including one whose failed turn a retry moved the key to
// within the window (its time is the retry's). Without the pruning every
// key stays for ever.
func TestChatSubmitKeysPruned(t *testing.T) {
	s, ctx := migrated(t)
	user := seedUser(t, s, "u")
	submit := func(key string, age time.Duration) *service.ChatSubmit {
		t.Helper()
		conv := &service.Conversation{ID: newID(), UserID: user.ID}
		q := service.Message{ID: newID(), ConversationID: conv.ID, Role: "user", Content: key, Status: service.MessageCompleted}
		sub := &service.ChatSubmit{UserID: user.ID, Key: key, ConversationID: conv.ID, MessageID: q.ID, TaskID: newID()}
		if err := s.SaveQuestion(ctx, conv, &q, sub); err != nil {
			t.Fatal(err)
		}
		if err := s.db.Exec(`UPDATE chat_submits SET created_at = now() - make_interval(secs => ?) WHERE request_key = ?`,
			age.Seconds(), key).Error; err != nil {
			t.Fatal(err)
		}
		return sub
	}
	const window = 24 * time.Hour
	submit("old-1", window+time.Hour)
	submit("old-2", 3*window)
	submit("fresh", window-time.Hour)
	retried := submit("retried", 2*window)
	q := service.Message{ID: newID(), ConversationID: retried.ConversationID, Role: "user", Content: "again", Status: service.MessageCompleted}
	if err := s.SaveQuestion(ctx, nil, &q, &service.ChatSubmit{UserID: user.ID, Key: "retried", ConversationID: retried.ConversationID,
		MessageID: q.ID, TaskID: newID(), Replaces: retried.MessageID}); err != nil {
		t.Fatal(err)
	}

	a := service.NewAuditor(s, s, nil, service.AuditorConfig{
		Retentions: []service.Retention{{What: "chat submit keys", Age: window, Delete: s.PruneChatSubmits}},
	})
	a.Prune(ctx)
	for _, key := range []string{"old-1", "old-2"} {
		if _, err := s.ChatSubmit(ctx, user.ID, key); !errors.Is(err, service.ErrNotFound) {
			t.Errorf("key %s, older than the %v window: %v, want it pruned", key, window, err)
		}
	}
	for _, key := range []string{"fresh", "retried"} {
		if _, err := s.ChatSubmit(ctx, user.ID, key); err != nil {
			t.Errorf("key %s within the window: %v, want it kept", key, err)
		}
	}
	var n int
	if err := s.db.Raw(`SELECT count(*) FROM chat_submits`).Scan(&n).Error; err != nil || n != 2 {
		t.Fatalf("%d chat submit keys left (%v), want 2", n, err)
	}
}

// PruneChatSubmits deletes at most limit keys a call, oldest first.
func TestPruneChatSubmitsBatches(t *testing.T) {
	s, ctx := migrated(t)
	for i := range 3 {
		if err := s.db.Exec(`INSERT INTO chat_submits (user_id, request_key, conversation_id, message_id, task_id, created_at)
			VALUES (1, ?, 1, 1, 1, now() - make_interval(hours => ?))`, fmt.Sprint("k", i), 48+i).Error; err != nil {
			t.Fatal(err)
		}
	}
	before := time.Now().Add(-24 * time.Hour)
	for _, want := range []int64{2, 1, 0} {
		if n, err := s.PruneChatSubmits(ctx, before, 2); err != nil || n != want {
			t.Fatalf("pruned %d (%v), want %d", n, err, want)
		}
	}
}
