// Package stream is the cross-instance registry of running chat tasks and
// their stop signal, on Redis.
//
// The instance running a task records its owner in {p}stream:task:{taskId}
// (a HASH with fields user and instance, its TTL refreshed while the task
// runs), so a stop request reaching any instance can be authorized. A stop
// sets the flag {p}stream:cancel:{taskId} (30 minutes) and publishes the
// taskId on {p}stream:cancel; every instance cancels the task if it runs it.
// The flag makes a stop that arrives before the task registers still win,
// and a periodic check of the flags of local tasks catches stops whose
// message was lost while the subscription was down.
//
// A failover may lose what the last moments wrote (replication is
// asynchronous): a stop flag, a task record. So the instance that accepted a
// stop for a task it does not run writes the flag and the message again at
// every check until the task's record is gone (the task ended) or a task TTL
// has passed, and every instance rewrites the records of its running tasks
// at every check: within a check interval of a promotion the new primary
// knows both again.
//
// A task is cancelled with the cause ErrStopped, which wraps
// service.ErrStopped, so the chat pipeline can tell a user's stop from a
// client disconnect or a shutdown. The Manager is the only registry of
// running tasks: it knows the local ones without Redis, so without Redis,
// stopping a task on the instance that runs it still works (DESIGN §11).
package stream

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/ragent-go/ragent/internal/lease"
	"github.com/ragent-go/ragent/service"
)

var (
	// ErrStopped is the cancel cause of a task stopped through Cancel.
	ErrStopped = fmt.Errorf("stream: %w", service.ErrStopped)
	// ErrNotFound means no running task has that id.
	ErrNotFound = fmt.Errorf("stream: task %w", service.ErrNotFound)
	// ErrUnavailable wraps Redis failures: the stop could not be recorded or
	// broadcast, or the owner could not be looked up.
	ErrUnavailable = fmt.Errorf("stream: redis %w", service.ErrUnavailable)
	// ErrRegistered means the task id is already registered on this instance.
	ErrRegistered = errors.New("stream: task already registered")
)

var (
	//go:embed lua/*.lua
	luaFiles         embed.FS
	unregisterScript = lease.Script(luaFiles, "unregister.lua")
	epochScript      = lease.Script(luaFiles, "epoch.lua")
)

// Manager registers the tasks this instance runs and cancels them when a
// stop for them arrives from any instance. It is safe for concurrent use.
type Manager struct {
	rdb           redis.UniversalClient
	prefix        string
	instanceID    string
	taskTTL       time.Duration
	cancelTTL     time.Duration
	checkInterval time.Duration
	opTimeout     time.Duration
	log           *slog.Logger

	mu    sync.Mutex
	tasks map[string]*task
	// stops are the stops this instance accepted for tasks it does not
	// run, re-sent at every check until the value (see Cancel).
	stops map[string]time.Time
	// epoch is the registry epoch this instance last saw (0: none yet).
	epoch atomic.Int64
	// recordMu orders refresh against unregister, so a refresh that read a
	// task before it ended cannot rewrite its record after the delete.
	recordMu sync.Mutex
}

type task struct {
	owner  string
	cancel context.CancelCauseFunc
	// stopped is set once cancel was called, so the flag check skips it.
	stopped bool
}

// Config tunes a Manager; the zero Config takes the defaults.
type Config struct {
	// TaskTTL is the TTL of a task record (default 60 s), refreshed every
	// third of it while the task runs, so records of a killed instance vanish.
	TaskTTL time.Duration
	// CheckInterval is how often Run checks the stop flags of local tasks,
	// the fallback for Pub/Sub messages lost while disconnected, rewrites
	// their records and re-sends the stops this instance accepted for
	// others' tasks, which a failover may have lost (default 1 s).
	CheckInterval time.Duration
	Logger        *slog.Logger // Redis failures; nil discards
}

// NewManager returns a manager for the instance instanceID, keeping its keys
// under prefix. Call Run to receive stops from other instances and to keep
// task records alive.
func NewManager(rdb redis.UniversalClient, prefix, instanceID string, cfg Config) *Manager {
	// Too short durations would stop the tickers in Run from ticking.
	if cfg.TaskTTL < 3*time.Millisecond {
		cfg.TaskTTL = time.Minute
	}
	cfg.CheckInterval = cmp.Or(max(cfg.CheckInterval, 0), time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	return &Manager{
		rdb:           rdb,
		prefix:        prefix,
		instanceID:    instanceID,
		taskTTL:       cfg.TaskTTL,
		cancelTTL:     30 * time.Minute,
		checkInterval: cfg.CheckInterval,
		opTimeout:     2 * time.Second,
		log:           cfg.Logger,
		tasks:         map[string]*task{},
		stops:         map[string]time.Time{},
	}
}

func (m *Manager) taskKey(taskID string) string   { return m.prefix + "stream:task:" + taskID }
func (m *Manager) cancelKey(taskID string) string { return m.prefix + "stream:cancel:" + taskID }
func (m *Manager) channel() string                { return m.prefix + "stream:cancel" }
func (m *Manager) epochKey() string               { return m.prefix + "stream:epoch" }

// refreshEvery is how often Run rewrites the records of local tasks.
func (m *Manager) refreshEvery() time.Duration { return min(m.taskTTL/3, m.checkInterval) }

// rebuilding is how long after a Redis lost its data (its epoch) a missing
// task record may still belong to a running task: every instance rewrites
// its records within a refresh period; one more, and a slow call, for a
// rewrite that failed once.
func (m *Manager) rebuilding() time.Duration { return 2*m.refreshEvery() + m.opTimeout }

// Register records that this instance runs taskID for ownerUserID; cancel is
// called with ErrStopped when the task is stopped, at once if a stop arrived
// before registration. The caller must call unregister when the task ends.
//
// Redis failures do not fail Register: the task is registered locally (so a
// stop on this instance works), the failure is logged and Run writes the
// record and checks the flag again on its next rounds. The error is non-nil
// only for an empty task or owner id or an already registered task id.
func (m *Manager) Register(ctx context.Context, taskID, ownerUserID string, cancel context.CancelCauseFunc) (unregister func(), err error) {
	if taskID == "" || ownerUserID == "" {
		return nil, errors.New("stream: empty task or owner id")
	}
	t := &task{owner: ownerUserID, cancel: cancel}
	m.mu.Lock()
	if _, ok := m.tasks[taskID]; ok {
		m.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrRegistered, taskID)
	}
	m.tasks[taskID] = t
	m.mu.Unlock()
	unregister = sync.OnceFunc(func() { m.unregister(taskID, t) })

	ctx, cancelOp := context.WithTimeout(ctx, m.opTimeout)
	defer cancelOp()
	var flag *redis.IntCmd
	_, err = m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		m.writeRecord(ctx, p, taskID, ownerUserID)
		flag = p.Exists(ctx, m.cancelKey(taskID))
		return nil
	})
	if err != nil {
		m.log.Warn("stream: task registered locally only", "task", taskID, "err", err)
		return unregister, nil
	}
	if flag.Val() == 1 {
		m.stop(t)
	}
	return unregister, nil
}

func (m *Manager) writeRecord(ctx context.Context, p redis.Pipeliner, taskID, owner string) {
	key := m.taskKey(taskID)
	p.HSet(ctx, key, "user", owner, "instance", m.instanceID)
	p.PExpire(ctx, key, m.taskTTL)
}

func (m *Manager) unregister(taskID string, t *task) {
	m.mu.Lock()
	if m.tasks[taskID] == t {
		delete(m.tasks, taskID)
	}
	m.mu.Unlock()
	m.recordMu.Lock()
	defer m.recordMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), m.opTimeout)
	defer cancel()
	if err := unregisterScript.Run(ctx, m.rdb, []string{m.taskKey(taskID)}, m.instanceID).Err(); err != nil {
		m.log.Warn("stream: task record not deleted; it expires with its TTL", "task", taskID, "err", err)
	}
}

// Owner returns the user who owns the running task taskID, or ErrNotFound.
// A task of this instance is answered without Redis.
//
// A Redis that has just lost its data (restarted empty, or a promoted
// replica behind its primary) lacks the records of running tasks until
// their instances rewrite them (Run, every refresh period). Within that
// time a missing record is ErrUnavailable, not ErrNotFound: a stop sent
// right after Redis came back empty would otherwise be answered "not
// found" for a task that runs on, and never be sent (the failover test,
// RELIABILITY.md, saw a stop at +20.2 s after a 20 s outage end so).
func (m *Manager) Owner(ctx context.Context, taskID string) (userID string, err error) {
	if t := m.local(taskID); t != nil {
		return t.owner, nil
	}
	user, err := m.rdb.HGet(ctx, m.taskKey(taskID), "user").Result()
	switch {
	case errors.Is(err, redis.Nil) || (err == nil && user == ""):
		return "", m.missing(ctx, taskID)
	case err != nil:
		return "", unavailable("look up task "+taskID, err)
	}
	return user, nil
}

// missing says why taskID has no record: it ended (ErrNotFound), or Redis
// lost the records less than rebuilding ago (ErrUnavailable): its epoch is
// gone, or is another than this instance saw before.
func (m *Manager) missing(ctx context.Context, taskID string) error {
	now, epoch, err := m.readEpoch(ctx, false)
	if err != nil {
		return unavailable("look up task "+taskID, err)
	}
	if seen := m.epoch.Load(); seen != 0 && epoch != seen &&
		(epoch < 0 || time.Duration(now-epoch)*time.Millisecond < m.rebuilding()) {
		return unavailable("look up task "+taskID,
			errors.New("redis lost its data a moment ago; the task records are being rewritten"))
	}
	return fmt.Errorf("%w: %s", ErrNotFound, taskID)
}

// readEpoch returns Redis' time and the registry's epoch (-1: none),
// creating it first with create.
func (m *Manager) readEpoch(ctx context.Context, create bool) (now, epoch int64, err error) {
	arg := "0"
	if create {
		arg = "1"
	}
	v, err := epochScript.Run(ctx, m.rdb, []string{m.epochKey()}, arg).Int64Slice()
	if err == nil && len(v) != 2 {
		err = fmt.Errorf("stream: unexpected epoch reply %v", v)
	}
	if err != nil {
		return 0, 0, err
	}
	return v[0], v[1], nil
}

// markEpoch gives a Redis without an epoch (new, or back without its data)
// one, and remembers it: from then on Owner tells a record a data loss took
// from one of an ended task. A later epoch is remembered once the records
// have had the time to be rewritten.
func (m *Manager) markEpoch(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, m.opTimeout)
	defer cancel()
	now, epoch, err := m.readEpoch(ctx, true)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			m.log.Warn("stream: registry epoch not read", "err", err)
		}
	case m.epoch.Load() == 0 || time.Duration(now-epoch)*time.Millisecond >= m.rebuilding():
		m.epoch.Store(epoch)
	}
}

// Cancel stops taskID wherever it runs: it cancels the task at once if this
// instance runs it (local reports that), sets the stop flag and broadcasts
// the stop to the other instances. Authorization is the caller's job (see
// Owner). If Redis fails, the error wraps ErrUnavailable; a local task has
// been cancelled all the same.
//
// A stop for a task another instance runs is sent again at every check of
// Run (flag and message), until the task's record is gone or a task TTL has
// passed, so a flag the new primary of a failover lost is written again,
// and a stop Redis refused now is delivered once it answers.
func (m *Manager) Cancel(ctx context.Context, taskID string) (local bool, err error) {
	local = m.stopLocal(taskID)
	if !local {
		m.mu.Lock()
		m.stops[taskID] = time.Now().Add(m.taskTTL)
		m.mu.Unlock()
	}
	_, err = m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		m.sendStop(ctx, p, taskID)
		return nil
	})
	if err != nil {
		return local, unavailable("stop task "+taskID, err)
	}
	return local, nil
}

func (m *Manager) sendStop(ctx context.Context, p redis.Pipeliner, taskID string) {
	p.Set(ctx, m.cancelKey(taskID), "1", m.cancelTTL)
	p.Publish(ctx, m.channel(), taskID)
}

// resendStops writes the stops this instance accepted again, and forgets
// those whose task has no record any more (it ended) or that are older than
// a task TTL. The flag is written before the record is looked at, so a
// record a failover lost, rewritten by its instance within a check, still
// finds its flag.
func (m *Manager) resendStops(ctx context.Context) {
	now := time.Now()
	m.mu.Lock()
	ids := make([]string, 0, len(m.stops))
	for id, until := range m.stops {
		if now.After(until) {
			delete(m.stops, id)
			continue
		}
		ids = append(ids, id)
	}
	m.mu.Unlock()
	running, err := m.pipelineEach(ctx, ids, func(ctx context.Context, p redis.Pipeliner, id string) *redis.IntCmd {
		m.sendStop(ctx, p, id)
		return p.Exists(ctx, m.taskKey(id))
	})
	if err != nil {
		m.log.Warn("stream: stops not re-sent", "stops", len(ids), "err", err)
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, id := range ids {
		if running[i].Val() == 0 {
			delete(m.stops, id)
		}
	}
}

// stop cancels t once.
func (m *Manager) stop(t *task) {
	m.mu.Lock()
	already := t.stopped
	t.stopped = true
	m.mu.Unlock()
	if !already {
		t.cancel(ErrStopped)
	}
}

// stopLocal stops taskID if this instance runs it, and reports whether so.
func (m *Manager) stopLocal(taskID string) bool {
	t := m.local(taskID)
	if t != nil {
		m.stop(t)
	}
	return t != nil
}

func (m *Manager) local(taskID string) *task {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.tasks[taskID]
}

// Run receives stops from other instances and keeps the records of local
// tasks alive until ctx is done. The subscription reconnects by itself after
// a drop (on a failover, to the new primary); stops published meanwhile are
// caught by the flag check, which runs on every (re)subscription and every
// check interval, together with the re-sending of accepted stops. The
// records are rewritten every check interval too (at least every third of
// their TTL), so a record a failover lost is back within one.
func (m *Manager) Run(ctx context.Context) error {
	sub := m.rdb.Subscribe(ctx, m.channel())
	defer sub.Close()
	msgs := sub.ChannelWithSubscriptions()

	check := time.NewTicker(m.checkInterval)
	defer check.Stop()
	refresh := time.NewTicker(m.refreshEvery())
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case msg, ok := <-msgs:
			if !ok {
				return errors.New("stream: subscription closed")
			}
			switch msg := msg.(type) {
			case *redis.Subscription:
				if msg.Kind == "subscribe" {
					m.markEpoch(ctx)
					m.checkFlags(ctx)
					m.refresh(ctx)
				}
			case *redis.Message:
				m.stopLocal(msg.Payload)
			}
		case <-check.C:
			m.checkFlags(ctx)
			m.resendStops(ctx)
		case <-refresh.C:
			// The epoch first: a Redis back empty gets one at once, and
			// the records follow within this refresh.
			m.markEpoch(ctx)
			m.refresh(ctx)
		}
	}
}

// checkFlags cancels local tasks whose stop flag is set.
func (m *Manager) checkFlags(ctx context.Context) {
	m.mu.Lock()
	ids := make([]string, 0, len(m.tasks))
	for id, t := range m.tasks {
		if !t.stopped {
			ids = append(ids, id)
		}
	}
	m.mu.Unlock()
	flags, err := m.pipelineEach(ctx, ids, func(ctx context.Context, p redis.Pipeliner, id string) *redis.IntCmd {
		return p.Exists(ctx, m.cancelKey(id))
	})
	if err != nil {
		m.log.Warn("stream: stop flags not checked", "tasks", len(ids), "err", err)
		return
	}
	for i, id := range ids {
		if flags[i].Val() == 1 {
			m.stopLocal(id)
		}
	}
}

// pipelineEach queues each's commands for every id in one pipeline, within
// the operation timeout (the ctx each is given), and returns the command
// each returned for it, in the order of ids. No ids send nothing.
func (m *Manager) pipelineEach(ctx context.Context, ids []string, each func(ctx context.Context, p redis.Pipeliner, id string) *redis.IntCmd) ([]*redis.IntCmd, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, m.opTimeout)
	defer cancel()
	cmds := make([]*redis.IntCmd, len(ids))
	_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = each(ctx, p, id)
		}
		return nil
	})
	return cmds, err
}

// refresh rewrites the records of local tasks with a fresh TTL; rewriting
// (not only extending) restores records lost while Redis was down.
func (m *Manager) refresh(ctx context.Context) {
	m.recordMu.Lock()
	defer m.recordMu.Unlock()
	m.mu.Lock()
	owners := make(map[string]string, len(m.tasks))
	for id, t := range m.tasks {
		owners[id] = t.owner
	}
	m.mu.Unlock()
	if len(owners) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, m.opTimeout)
	defer cancel()
	_, err := m.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for id, owner := range owners {
			m.writeRecord(ctx, p, id, owner)
		}
		return nil
	})
	if err != nil {
		m.log.Warn("stream: task records not refreshed", "tasks", len(owners), "err", err)
	}
}

// unavailable wraps a Redis failure in ErrUnavailable; the caller's own
// cancellation stays what it is.
func unavailable(op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("stream: %s: %w", op, err)
	}
	return fmt.Errorf("stream: %s: %w: %w", op, ErrUnavailable, err)
}
