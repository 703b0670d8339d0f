package stream

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/ragent-go/ragent/internal/testenv"
	"github.com/ragent-go/ragent/service"
)

// follow collects what Follow emits until it returns.
func follow(t *testing.T, j *Journal, ctx context.Context, taskID string, after int) ([]service.TaskEvent, error) {
	t.Helper()
	var got []service.TaskEvent
	err := j.Follow(ctx, taskID, after, "done", func(e service.TaskEvent) error {
		got = append(got, e)
		return nil
	})
	return got, err
}

func events(from, to int, last string) []service.TaskEvent {
	var out []service.TaskEvent
	for i := from; i <= to; i++ {
		name, data := "message", fmt.Sprintf(`{"delta":"part%d"}`, i)
		if i == to && last != "" {
			name, data = last, ""
		}
		out = append(out, service.TaskEvent{ID: i, Name: name, Data: []byte(data)})
	}
	return out
}

func assertEvents(t *testing.T, got, want []service.TaskEvent) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d events, want %d: %v", len(got), len(want), got)
	}
	for i := range got {
		if got[i].ID != want[i].ID || got[i].Name != want[i].Name || string(got[i].Data) != string(want[i].Data) {
			t.Fatalf("event %d: got %+v, want %+v", i, got[i], want[i])
		}
	}
}

// A reader on another client replays what was written after its id, then
// follows the live events until done; the reader record says who may read.
func TestJournalReplaysThenFollows(t *testing.T) {
	prefix := testenv.Prefix(t)
	writer := NewJournal(testenv.Redis(t), prefix, JournalConfig{})
	reader := NewJournal(testenv.Redis(t), prefix, JournalConfig{})
	want := service.TaskReader{Owner: 42, KnowledgeBaseIDs: []service.ID{7, 9}}
	appendEvent, closeJournal := writer.Open(t.Context(), "task-1", want)
	all := events(1, 30, "done")
	for _, e := range all[:10] {
		appendEvent(e)
	}

	got, err := reader.Reader(t.Context(), "task-1")
	if err != nil || got.Owner != want.Owner || fmt.Sprint(got.KnowledgeBaseIDs) != fmt.Sprint(want.KnowledgeBaseIDs) {
		t.Fatalf("Reader = %+v, %v; want %+v", got, err, want)
	}
	type result struct {
		events []service.TaskEvent
		err    error
	}
	res := make(chan result, 1)
	go func() {
		ev, err := follow(t, reader, t.Context(), "task-1", 5)
		res <- result{ev, err}
	}()
	for _, e := range all[10:] {
		appendEvent(e)
	}
	closeJournal()
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("Follow: %v", r.err)
		}
		assertEvents(t, r.events, all[5:])
	case <-time.After(10 * time.Second):
		t.Fatal("Follow did not end with done")
	}

	// Once done is written, a late reader replays everything and returns.
	ev, err := follow(t, reader, t.Context(), "task-1", 0)
	if err != nil {
		t.Fatal(err)
	}
	assertEvents(t, ev, all)
	if ev, err = follow(t, reader, t.Context(), "task-1", 29); err != nil || len(ev) != 1 || ev[0].Name != "done" {
		t.Fatalf("after 29: %v, %v", ev, err)
	}
}

func TestJournalKeysShareASlotAndExpire(t *testing.T) {
	prefix := testenv.Prefix(t)
	rdb := testenv.Redis(t)
	j := NewJournal(rdb, prefix, JournalConfig{TTL: 300 * time.Millisecond})
	appendEvent, closeJournal := j.Open(t.Context(), "task-ttl", service.TaskReader{Owner: 1})
	appendEvent(service.TaskEvent{ID: 1, Name: "done"})
	closeJournal()
	// One hash tag for both keys: a Cluster keeps them on one slot.
	if a, b := j.eventsKey("task-ttl"), j.readerKey("task-ttl"); hashTag(a) != "task-ttl" || hashTag(b) != "task-ttl" {
		t.Fatalf("keys %q %q do not share the hash tag {task-ttl}", a, b)
	}
	for _, key := range []string{j.eventsKey("task-ttl"), j.readerKey("task-ttl")} {
		if ttl := rdb.PTTL(t.Context(), key).Val(); ttl <= 0 || ttl > 300*time.Millisecond {
			t.Fatalf("%s has TTL %v, want (0, 300ms]", key, ttl)
		}
	}
	testenv.Eventually(t, 5*time.Second, "the journal to expire", func() bool {
		_, err := j.Reader(t.Context(), "task-ttl")
		return errors.Is(err, service.ErrNotFound)
	})
	if _, err := follow(t, j, t.Context(), "task-ttl", 0); !errors.Is(err, service.ErrNotFound) {
		t.Fatalf("Follow of an expired journal: %v, want ErrNotFound", err)
	}
}

// hashTag returns what Redis Cluster hashes of key: the part in the first
// {…}, or the whole key.
func hashTag(key string) string {
	for i := 0; i < len(key); i++ {
		if key[i] == '{' {
			for k := i + 1; k < len(key); k++ {
				if key[k] == '}' && k > i+1 {
					return key[i+1 : k]
				}
			}
			break
		}
	}
	return key
}

// The stream keeps its newest MaxEvents (about: MAXLEN ~); a reader asking
// for trimmed ones is told so before anything is emitted, one asking for
// kept ones is served.
func TestJournalTrimmedEventsAreReported(t *testing.T) {
	prefix := testenv.Prefix(t)
	j := NewJournal(testenv.Redis(t), prefix, JournalConfig{MaxEvents: 100})
	appendEvent, closeJournal := j.Open(t.Context(), "task-long", service.TaskReader{Owner: 1})
	all := events(1, 1000, "done")
	for _, e := range all {
		appendEvent(e)
	}
	closeJournal()
	ev, err := follow(t, j, t.Context(), "task-long", 0)
	if !errors.Is(err, ErrTrimmed) || !errors.Is(err, service.ErrConflict) || len(ev) != 0 {
		t.Fatalf("from 0: %d events, %v; want ErrTrimmed wrapping ErrConflict and nothing", len(ev), err)
	}
	ev, err = follow(t, j, t.Context(), "task-long", 950)
	if err != nil {
		t.Fatal(err)
	}
	assertEvents(t, ev, all[950:])
}

// A follower waits for events while the task runs and ends with its
// context; one of an unknown task finds no reader.
func TestJournalFollowEndsWithContext(t *testing.T) {
	prefix := testenv.Prefix(t)
	j := NewJournal(testenv.Redis(t), prefix, JournalConfig{})
	appendEvent, closeJournal := j.Open(t.Context(), "task-wait", service.TaskReader{Owner: 1})
	appendEvent(service.TaskEvent{ID: 1, Name: "meta", Data: []byte("{}")})
	closeJournal()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	ev, err := follow(t, j, ctx, "task-wait", 0)
	if len(ev) != 1 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, %v; want meta then the context's end", ev, err)
	}
	if _, err := j.Reader(t.Context(), "task-none"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Reader of an unknown task: %v", err)
	}
}
