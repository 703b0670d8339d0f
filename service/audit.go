package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
	"unicode/utf8"
)

// AuditResult is how a recorded action ended.
type AuditResult string

// The audit results. A refused or failed change is recorded as well as a
// successful one, with the result its error maps to (AuditResultOf).
const (
	AuditSuccess  AuditResult = "success"   // the change committed, the login succeeded
	AuditDenied   AuditResult = "denied"    // not allowed, or wrong credentials
	AuditInvalid  AuditResult = "invalid"   // the input was refused
	AuditNotFound AuditResult = "not_found" // the target does not exist (or is not visible)
	AuditConflict AuditResult = "conflict"  // clashes with existing data or a rule (e.g. deleting yourself)
	AuditLocked   AuditResult = "locked"    // refused by the password-attempt limit
	AuditFailed   AuditResult = "failed"    // an unexpected error; the change rolled back
)

// Valid reports whether r is a known result.
func (r AuditResult) Valid() bool {
	switch r {
	case AuditSuccess, AuditDenied, AuditInvalid, AuditNotFound, AuditConflict, AuditLocked, AuditFailed:
		return true
	}
	return false
}

// AuditResultOf maps a change's error to its recorded result.
func AuditResultOf(err error) AuditResult {
	switch {
	case err == nil:
		return AuditSuccess
	case errors.Is(err, ErrForbidden), errors.Is(err, ErrUnauthenticated):
		return AuditDenied
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrTooLarge), errors.Is(err, ErrUnsupported):
		return AuditInvalid
	case errors.Is(err, ErrNotFound):
		return AuditNotFound
	case errors.Is(err, ErrConflict):
		return AuditConflict
	case errors.Is(err, ErrBusy):
		return AuditLocked
	}
	return AuditFailed
}

// The audited actions (docs/security.md "Audit log").
const (
	AuditLogin             = "auth.login"
	AuditPasswordChange    = "auth.password_change"
	AuditSSOLogin          = "auth.sso_login"
	AuditSSORecheck        = "auth.sso_recheck"
	AuditSSOLogout         = "auth.sso_logout"
	AuditUserProvision     = "user.provision"
	AuditGroupSync         = "group.sync"
	AuditUserCreate        = "user.create"
	AuditUserUpdate        = "user.update"
	AuditUserDelete        = "user.delete"
	AuditGroupCreate       = "group.create"
	AuditGroupUpdate       = "group.update"
	AuditGroupDelete       = "group.delete"
	AuditGroupMemberAdd    = "group.member_add"
	AuditGroupMemberRemove = "group.member_remove"
	AuditKBCreate          = "kb.create"
	AuditKBUpdate          = "kb.update"
	AuditKBDelete          = "kb.delete"
	AuditKBMemberPut       = "kb.member_put"
	AuditKBMemberRemove    = "kb.member_remove"
	AuditDocumentUpload    = "document.upload"
	AuditDocumentDelete    = "document.delete"
	AuditDocumentReindex   = "document.reindex"
	AuditDocumentImport    = "document.import"
	AuditIntentCreate      = "intent.create"
	AuditIntentUpdate      = "intent.update"
	AuditIntentDelete      = "intent.delete"
	AuditTermCreate        = "term.create"
	AuditTermUpdate        = "term.update"
	AuditTermDelete        = "term.delete"
	AuditAPIKeyCreate      = "api_key.create"
	AuditAPIKeyRevoke      = "api_key.revoke"
	AuditWebhookCreate     = "webhook.create"
	AuditWebhookDelete     = "webhook.delete"
	AuditQuotaPut          = "quota.put"
	AuditQuotaDelete       = "quota.delete"
	AuditChunkCreate       = "chunk.create"
	AuditChunkUpdate       = "chunk.update"
	AuditChunkDelete       = "chunk.delete"
	AuditChunkRestore      = "chunk.restore"
)

// The audited target types.
const (
	TargetUser          = "user"
	TargetGroup         = "group"
	TargetKnowledgeBase = "knowledge_base"
	TargetDocument      = "document"
	TargetIntent        = "intent"
	TargetTermMapping   = "term_mapping"
	TargetAPIKey        = "api_key"
	TargetWebhook       = "webhook"
	TargetQuota         = "quota"
	TargetChunk         = "chunk"
)

// AuditEvent is one row of the append-only audit log. The actor is a user,
// an API key (ActorKeyID, with the key's owner as ActorUserID when it has
// one), or nobody (a failed login: the username tried is the target).
type AuditEvent struct {
	ID          ID          `json:"id"`
	At          time.Time   `json:"at"`
	ActorUserID ID          `json:"actorUserId,omitempty"`
	ActorKeyID  ID          `json:"actorKeyId,omitempty"`
	ActorName   string      `json:"actorName"`
	Action      string      `json:"action"`
	TargetType  string      `json:"targetType"`
	TargetID    string      `json:"targetId"`
	Result      AuditResult `json:"result"`
	// Detail says what changed (e.g. "role=admin") or, for a failure,
	// the error message the caller saw.
	Detail    string `json:"detail,omitempty"`
	RequestID string `json:"requestId"`
	IP        string `json:"ip"`
}

// AuditFilter selects audit events; zero fields match everything. Events
// come newest first; Before pages (ids below it).
type AuditFilter struct {
	ActorUserID ID
	Action      string
	TargetID    string
	Result      AuditResult
	Since       time.Time // at >= Since
	Until       time.Time // at < Until
	Before      ID
	Limit       int
}

// AuditStore appends audit events. Called with a context from
// Transactor.InTx, the event joins that transaction.
type AuditStore interface {
	AppendAudit(ctx context.Context, e *AuditEvent) error
}

// AuditPruner deletes failed sign-ins, the one kind of event with a
// retention: every unknown username tried is one, for ever otherwise.
type AuditPruner interface {
	// PruneFailedLogins deletes up to limit failed sign-in events recorded
	// before t and returns how many it deleted.
	PruneFailedLogins(ctx context.Context, before time.Time, limit int) (int64, error)
}

// Transactor runs fn in one database transaction: every store call made
// with the context fn receives joins it, and it commits when fn returns nil.
type Transactor interface {
	InTx(ctx context.Context, fn func(ctx context.Context) error) error
}

// Auditor records audited changes. Use cases call Do around the part of a
// change that writes; Record for what changes nothing (a login).
type Auditor struct {
	tx    Transactor
	store AuditStore
	ids   IDGenerator
	now   func() time.Time
	log   *slog.Logger
	cfg   AuditorConfig

	mu sync.Mutex
	// pending holds, per principal and kind of refusal, the window's first
	// time and the refusals not written since (coalescing).
	pending map[refusalKind]*coalesced
}

// AuditorConfig is what an Auditor takes besides its stores.
type AuditorConfig struct {
	Logger *slog.Logger     // events that could not be recorded; nil discards
	Now    func() time.Time // nil is time.Now
	// CoalesceWindow: refusals of one kind (action and result) by one
	// principal (the user or API key, else the client address) within it
	// share rows: the first is written at once, the rest are counted and
	// written as one summary row when the window ends (Run), so a flood of
	// refused requests writes two rows a window, not one per request. Each
	// instance coalesces its own. 0 writes every refusal.
	CoalesceWindow time.Duration
	// LoginRetention: Run deletes failed sign-ins older than this through
	// Pruner; 0 (or no Pruner) keeps them.
	LoginRetention time.Duration
	Pruner         AuditPruner
	// Retentions are the other tables Run's hourly turn prunes (cmd/ragent:
	// the chat submit keys past their idempotency window).
	Retentions []Retention
}

// Retention is a table pruned by the Auditor's hourly turn: Delete removes
// up to limit rows older than before and returns how many it removed.
type Retention struct {
	What   string        // for the log, e.g. "chat submit keys"
	Age    time.Duration // rows older than this are deleted; 0 keeps them
	Delete func(ctx context.Context, before time.Time, limit int) (int64, error)
}

// refusalKind is what coalescing groups refusals by.
type refusalKind struct {
	principal, action string
	result            AuditResult
}

type coalesced struct {
	since time.Time
	n     int        // refusals not written since
	last  AuditEvent // the latest of them, filled in from its request
}

// NewAuditor returns an Auditor.
func NewAuditor(tx Transactor, store AuditStore, ids IDGenerator, cfg AuditorConfig) *Auditor {
	a := &Auditor{tx: tx, store: store, ids: ids, now: cfg.Now, log: cfg.Logger, cfg: cfg, pending: map[refusalKind]*coalesced{}}
	if a.now == nil {
		a.now = time.Now
	}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	return a
}

// Do runs change in a transaction and records ev in the same one, so a
// change commits together with its event or neither is stored. change may
// fill in ev (the id of what it created, a detail). When change fails, the
// transaction rolls back and ev is recorded in a transaction of its own
// with the failure as its result; the change's error is returned either
// way. Run only database work inside change: side effects (a cache
// invalidation, a wake-up) belong after Do returns nil.
func (a *Auditor) Do(ctx context.Context, ev AuditEvent, change func(ctx context.Context, ev *AuditEvent) error) error {
	err := a.tx.InTx(ctx, func(ctx context.Context) error {
		if err := change(ctx, &ev); err != nil {
			return err
		}
		ev.Result = AuditSuccess
		return a.append(ctx, &ev)
	})
	if err != nil {
		// Also when change succeeded and the event or the commit failed:
		// nothing of the change is stored, and that is what is recorded.
		a.Fail(ctx, ev, err)
	}
	return err
}

// AuditDo is Auditor.Do for a change that returns what it made: the value
// on success, the zero value with the error otherwise (also when the change
// succeeded but its event or the commit failed, so nothing was stored).
func AuditDo[T any](ctx context.Context, a *Auditor, ev AuditEvent, change func(ctx context.Context, ev *AuditEvent) (T, error)) (T, error) {
	var out T
	err := a.Do(ctx, ev, func(ctx context.Context, ev *AuditEvent) error {
		var err error
		out, err = change(ctx, ev)
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return out, nil
}

// Fail records ev as failed with err: a change refused before it began to
// write (Do records the refusals inside change itself). Refusals coalesce
// (AuditorConfig.CoalesceWindow).
func (a *Auditor) Fail(ctx context.Context, ev AuditEvent, err error) {
	ev.Result = AuditResultOf(err)
	if ev.Detail != "" {
		ev.Detail += ": " + err.Error()
	} else {
		ev.Detail = err.Error()
	}
	ev.Detail = truncate(ev.Detail, maxDetailRunes)
	if a.cfg.CoalesceWindow > 0 && ev.Result != AuditSuccess && a.coalesce(ctx, ev) {
		return
	}
	a.Record(ctx, ev)
}

// The bounds of what an event keeps of its input (a username tried, a raw
// path parameter), so no client can make a row too large for the table's
// indexes or a log line of any size.
const (
	maxDetailRunes = 500
	maxTargetRunes = 128
)

func truncate(s string, runes int) string {
	if utf8.RuneCountInString(s) <= runes {
		return s
	}
	return string([]rune(s)[:runes])
}

// coalesce counts ev instead of writing it when a refusal of its kind by
// its principal was written within the window, and reports whether it did.
// A window that has ended is written out first.
func (a *Auditor) coalesce(ctx context.Context, ev AuditEvent) bool {
	a.fill(ctx, &ev)
	key := refusalKind{principal: "ip:" + ev.IP, action: ev.Action, result: ev.Result}
	if p, ok := PrincipalFrom(ctx); ok {
		key.principal = "user:" + p.UserID.String()
		if p.Key != nil {
			key.principal = "key:" + p.Key.KeyID.String()
		}
	}
	now := a.now()
	a.mu.Lock()
	c := a.pending[key]
	if c != nil && now.Sub(c.since) < a.cfg.CoalesceWindow {
		c.n++
		c.last = ev
		a.mu.Unlock()
		return true
	}
	a.pending[key] = &coalesced{since: now}
	a.mu.Unlock()
	if c != nil {
		a.writeSummary(context.WithoutCancel(ctx), c)
	}
	return false
}

// writeSummary writes the refusals c counted as one row, if there were any.
func (a *Auditor) writeSummary(ctx context.Context, c *coalesced) {
	if c.n == 0 {
		return
	}
	ev := c.last
	ev.Detail = truncate(fmt.Sprintf("%d more like this since %s (coalesced); the last: %s",
		c.n, c.since.UTC().Format(time.RFC3339), ev.Detail), maxDetailRunes)
	if err := a.write(ctx, &ev); err != nil {
		a.log.ErrorContext(ctx, "audit event not recorded", "action", ev.Action, "target", ev.TargetID,
			"result", ev.Result, "coalesced", c.n, "err", err)
	}
}

// flush writes out the windows that ended by now, or all with everything.
func (a *Auditor) flush(ctx context.Context, everything bool) {
	now := a.now()
	var due []*coalesced
	a.mu.Lock()
	for k, c := range a.pending {
		if everything || now.Sub(c.since) >= a.cfg.CoalesceWindow {
			due = append(due, c)
			delete(a.pending, k)
		}
	}
	a.mu.Unlock()
	for _, c := range due {
		a.writeSummary(ctx, c)
	}
}

// pruneBatch bounds one delete of a retention.
const pruneBatch = 5000

// retentions are the tables Prune prunes: the failed sign-ins, then
// cfg.Retentions.
func (a *Auditor) retentions() []Retention {
	var rs []Retention
	if a.cfg.LoginRetention > 0 && a.cfg.Pruner != nil {
		rs = append(rs, Retention{What: "failed sign-ins", Age: a.cfg.LoginRetention, Delete: a.cfg.Pruner.PruneFailedLogins})
	}
	for _, r := range a.cfg.Retentions {
		if r.Age > 0 && r.Delete != nil {
			rs = append(rs, r)
		}
	}
	return rs
}

// Prune deletes what is past each retention, a batch at a time; a failure
// is logged and the next retention is pruned still. Run calls it hourly.
func (a *Auditor) Prune(ctx context.Context) {
	for _, r := range a.retentions() {
		a.prune(ctx, r)
	}
}

func (a *Auditor) prune(ctx context.Context, r Retention) {
	before := a.now().Add(-r.Age)
	for ctx.Err() == nil {
		n, err := r.Delete(ctx, before, pruneBatch)
		if err != nil {
			if ctx.Err() == nil {
				a.log.WarnContext(ctx, "not pruned", "what", r.What, "err", err)
			}
			return
		}
		if n > 0 {
			a.log.InfoContext(ctx, "pruned", "what", r.What, "rows", n, "before", before)
		}
		if n < pruneBatch {
			return
		}
	}
}

// auditPruneEvery is how often Run prunes.
const auditPruneEvery = time.Hour

// Run writes coalesced refusals out as their windows end and prunes failed
// sign-ins and the Retentions (Prune: at once, then hourly), until ctx ends; then
// it writes out every window still open. Every instance runs it.
func (a *Auditor) Run(ctx context.Context) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	prune := len(a.retentions()) > 0
	var lastPrune time.Time
	for {
		if prune && (lastPrune.IsZero() || a.now().Sub(lastPrune) >= auditPruneEvery) {
			lastPrune = a.now()
			a.Prune(ctx)
		}
		select {
		case <-ctx.Done():
			done, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			a.flush(done, true)
			return ctx.Err()
		case <-tick.C:
			a.flush(ctx, false)
		}
	}
}

// Record appends ev on its own, filling in the actor and the request from
// ctx. An event that cannot be written is logged: the outcome it records
// has already happened. A client that went away does not cancel it.
func (a *Auditor) Record(ctx context.Context, ev AuditEvent) {
	if err := a.append(context.WithoutCancel(ctx), &ev); err != nil {
		a.log.ErrorContext(ctx, "audit event not recorded", "action", ev.Action, "target", ev.TargetID,
			"result", ev.Result, "err", err)
	}
}

func (a *Auditor) append(ctx context.Context, ev *AuditEvent) error {
	a.fill(ctx, ev)
	return a.write(ctx, ev)
}

// write stores ev with a new id and time.
func (a *Auditor) write(ctx context.Context, ev *AuditEvent) error {
	id, err := a.ids.NextID()
	if err != nil {
		return err
	}
	ev.ID, ev.At = id, a.now().UTC()
	if ev.Result == "" {
		ev.Result = AuditSuccess
	}
	return a.store.AppendAudit(ctx, ev)
}

// fill sets ev's actor (unless set), request id and client address from
// ctx, and bounds its target.
func (a *Auditor) fill(ctx context.Context, ev *AuditEvent) {
	ev.TargetID = truncate(ev.TargetID, maxTargetRunes)
	if ev.ActorUserID == 0 && ev.ActorKeyID == 0 && ev.ActorName == "" {
		if p, ok := PrincipalFrom(ctx); ok {
			ev.ActorUserID, ev.ActorName = p.UserID, p.Username
			if p.Key != nil {
				ev.ActorKeyID = p.Key.KeyID
			}
		}
	}
	ev.RequestID, ev.IP = RequestID(ctx), ClientIP(ctx)
}
