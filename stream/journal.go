package stream

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/service"
)

// ErrTrimmed means events a reader asked for are no longer kept: the
// journal holds only its newest MaxEvents.
var ErrTrimmed = fmt.Errorf("stream: events %w", service.ErrConflict)

// Journal keeps the events of resumable chat tasks in Redis, so a client
// that lost its stream can read what it missed and follow the rest from any
// instance.
//
// A task's events go to the Redis Stream {p}stream:{taskId}:events, each
// entry under the explicit id 0-<seq> (seq is the SSE id the client saw),
// so "the events after Last-Event-ID n" is XREAD from 0-n. Who may read
// them is the HASH {p}stream:{taskId}:reader. Both keys share the hash tag
// {taskId}, so they live on one Cluster slot. The stream is capped at
// MaxEvents entries (approximately: MAXLEN ~) and both keys expire TTL after
// the task's last event.
//
// Appends never wait for Redis: they are queued and written in batches (one
// pipeline per batch) by at most one goroutine per task, started only while
// there is something to write, so a slow Redis slows nobody's answer and a
// task between events costs no goroutine.
type Journal struct {
	rdb       redis.UniversalClient
	prefix    string
	ttl       time.Duration
	maxEvents int64
	block     time.Duration
	opTimeout time.Duration
	log       *slog.Logger
}

// JournalConfig tunes a Journal; the zero JournalConfig takes the defaults.
type JournalConfig struct {
	// TTL is how long a task's events are kept after its last one
	// (default 5 minutes).
	TTL time.Duration
	// MaxEvents caps the events kept per task (default 10000); a reader
	// that asks for trimmed ones gets ErrTrimmed.
	MaxEvents int
	Logger    *slog.Logger // Redis failures; nil discards
}

// NewJournal returns a journal keeping its keys under prefix.
func NewJournal(rdb redis.UniversalClient, prefix string, cfg JournalConfig) *Journal {
	return &Journal{
		rdb:       rdb,
		prefix:    prefix,
		ttl:       cmp.Or(max(cfg.TTL, 0), 5*time.Minute),
		maxEvents: int64(cmp.Or(max(cfg.MaxEvents, 0), 10000)),
		block:     time.Second, // go-redis does not cut a blocked read when ctx ends
		opTimeout: 2 * time.Second,
		log:       cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler)),
	}
}

func (j *Journal) eventsKey(taskID string) string { return j.prefix + "stream:{" + taskID + "}:events" }
func (j *Journal) readerKey(taskID string) string { return j.prefix + "stream:{" + taskID + "}:reader" }

// Open starts taskID's journal, readable by reader. It writes the reader
// at once (so a client that got the task id can resume right away); when
// that fails the task is not resumable: the failure is logged and append
// drops its events. append queues one event; close waits (a few seconds at
// most) for the queued ones to be written and must be called once, after
// the last append.
func (j *Journal) Open(ctx context.Context, taskID string, reader service.TaskReader) (append func(service.TaskEvent), close func()) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), j.opTimeout)
	defer cancel()
	key := j.readerKey(taskID)
	_, err := j.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSet(ctx, key, "owner", reader.Owner.String(), "kbs", encodeKBs(reader.KnowledgeBaseIDs), "visitor", reader.Visitor)
		p.PExpire(ctx, key, j.ttl)
		return nil
	})
	if err != nil {
		j.log.Warn("stream: task not resumable, its reader was not recorded", "task", taskID, "err", err)
		return func(service.TaskEvent) {}, func() {}
	}
	w := &journalWriter{j: j, taskID: taskID}
	return w.append, w.close
}

// journalWriter batches one task's events into Redis.
type journalWriter struct {
	j      *Journal
	taskID string

	mu       sync.Mutex
	pending  []service.TaskEvent
	flushing bool
	failed   bool // a batch was lost: later ones would leave a gap, so none is written
	idle     *sync.Cond
}

func (w *journalWriter) append(e service.TaskEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed {
		return
	}
	w.pending = append(w.pending, e)
	if !w.flushing {
		w.flushing = true
		go w.flush()
	}
}

// flush writes batches until none is pending.
func (w *journalWriter) flush() {
	for {
		w.mu.Lock()
		batch := w.pending
		w.pending = nil
		if len(batch) == 0 || w.failed {
			w.flushing = false
			if w.idle != nil {
				w.idle.Broadcast()
			}
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		if err := w.write(batch); err != nil {
			w.j.log.Warn("stream: task events not kept; a resumed stream of it will end early", "task", w.taskID, "events", len(batch), "err", err)
			w.mu.Lock()
			w.failed = true
			w.mu.Unlock()
		}
	}
}

func (w *journalWriter) write(batch []service.TaskEvent) error {
	j := w.j
	ctx, cancel := context.WithTimeout(context.Background(), j.opTimeout)
	defer cancel()
	events, reader := j.eventsKey(w.taskID), j.readerKey(w.taskID)
	_, err := j.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, e := range batch {
			p.XAdd(ctx, &redis.XAddArgs{
				Stream: events, MaxLen: j.maxEvents, Approx: true,
				ID:     "0-" + strconv.Itoa(e.ID),
				Values: []string{"e", e.Name, "d", string(e.Data)},
			})
		}
		p.PExpire(ctx, events, j.ttl)
		p.PExpire(ctx, reader, j.ttl)
		return nil
	})
	return err
}

// close waits until nothing is pending or being written.
func (w *journalWriter) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.idle == nil {
		w.idle = sync.NewCond(&w.mu)
	}
	for w.flushing {
		w.idle.Wait()
	}
}

// Reader returns who may read taskID's events, or ErrNotFound when none
// are kept (never resumable, expired, or an unknown id).
func (j *Journal) Reader(ctx context.Context, taskID string) (service.TaskReader, error) {
	vals, err := j.rdb.HGetAll(ctx, j.readerKey(taskID)).Result()
	if err != nil {
		return service.TaskReader{}, unavailable("look up the reader of task "+taskID, err)
	}
	owner, err := service.ParseID(vals["owner"])
	if err != nil || owner == 0 {
		return service.TaskReader{}, fmt.Errorf("%w: %s", ErrNotFound, taskID)
	}
	kbs, err := decodeKBs(vals["kbs"])
	if err != nil {
		return service.TaskReader{}, fmt.Errorf("stream: reader of task %s: %w", taskID, err)
	}
	return service.TaskReader{Owner: owner, KnowledgeBaseIDs: kbs, Visitor: vals["visitor"]}, nil
}

// Follow emits taskID's events numbered after after, then the later ones as
// they are appended, until the done event (then it returns nil), ctx ends,
// emit fails (its error is returned) or the journal expires (ErrNotFound:
// its task died, or its events stopped being written). ErrTrimmed, before
// anything is emitted, means some of the events asked for are gone.
func (j *Journal) Follow(ctx context.Context, taskID string, after int, done string, emit func(service.TaskEvent) error) error {
	events := j.eventsKey(taskID)
	var (
		kept   *redis.IntCmd
		oldest *redis.XMessageSliceCmd
	)
	_, err := j.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		kept = p.Exists(ctx, j.readerKey(taskID))
		oldest = p.XRangeN(ctx, events, "-", "+", 1)
		return nil
	})
	if err != nil {
		return unavailable("read the events of task "+taskID, err)
	}
	if kept.Val() == 0 {
		return fmt.Errorf("%w: %s (no events kept)", ErrNotFound, taskID)
	}
	if first := oldest.Val(); len(first) == 1 {
		if seq, err := entrySeq(first[0].ID); err == nil && seq > after+1 && after >= 0 {
			return fmt.Errorf("%w: task %s keeps events from %d on, after %d was asked for", ErrTrimmed, taskID, seq, after)
		}
	}
	last := "0-" + strconv.Itoa(max(after, 0))
	for {
		res, err := j.rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{events, last}, Count: 512, Block: j.block}).Result()
		switch {
		case errors.Is(err, redis.Nil):
			// Nothing new within the block: is the task's journal still kept?
			n, err := j.rdb.Exists(ctx, j.readerKey(taskID)).Result()
			if err != nil {
				return unavailable("look up task "+taskID, err)
			}
			if n == 0 {
				return fmt.Errorf("%w: %s (its events expired)", ErrNotFound, taskID)
			}
			continue
		case err != nil:
			return unavailable("read the events of task "+taskID, err)
		}
		for _, s := range res {
			for _, m := range s.Messages {
				seq, err := entrySeq(m.ID)
				if err != nil {
					return fmt.Errorf("stream: task %s: %w", taskID, err)
				}
				name, _ := m.Values["e"].(string)
				data, _ := m.Values["d"].(string)
				if err := emit(service.TaskEvent{ID: seq, Name: name, Data: []byte(data)}); err != nil {
					return err
				}
				if name == done {
					return nil
				}
				last = m.ID
			}
		}
	}
}

// entrySeq reads seq back from an entry id 0-<seq>.
func entrySeq(id string) (int, error) {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok || ms != "0" {
		return 0, fmt.Errorf("entry id %q is not 0-<seq>", id)
	}
	return strconv.Atoi(seq)
}

// encodeKBs writes a reader's knowledge bases: "*" for unknown (nil), else
// the ids joined by commas (empty for none).
func encodeKBs(ids []service.ID) string {
	if ids == nil {
		return "*"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = id.String()
	}
	return strings.Join(s, ",")
}

func decodeKBs(s string) ([]service.ID, error) {
	if s == "*" {
		return nil, nil
	}
	ids := []service.ID{}
	for _, f := range strings.Split(s, ",") {
		if f == "" {
			continue
		}
		id, err := service.ParseID(f)
		if err != nil {
			return nil, err
		}
		ids = append(ids, id)
	}
	return ids, nil
}
