package service

import (
	"context"
	"errors"
	"log/slog"
	"time"
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

// The audited actions (README "Audit log").
const (
	AuditLogin             = "auth.login"
	AuditPasswordChange    = "auth.password_change"
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
}

// AuditorConfig is what an Auditor takes besides its stores.
type AuditorConfig struct {
	Logger *slog.Logger     // events that could not be recorded; nil discards
	Now    func() time.Time // nil is time.Now
}

// NewAuditor returns an Auditor.
func NewAuditor(tx Transactor, store AuditStore, ids IDGenerator, cfg AuditorConfig) *Auditor {
	a := &Auditor{tx: tx, store: store, ids: ids, now: cfg.Now, log: cfg.Logger}
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
// write (Do records the refusals inside change itself).
func (a *Auditor) Fail(ctx context.Context, ev AuditEvent, err error) {
	ev.Result = AuditResultOf(err)
	if ev.Detail != "" {
		ev.Detail += ": " + err.Error()
	} else {
		ev.Detail = err.Error()
	}
	if r := []rune(ev.Detail); len(r) > 500 {
		ev.Detail = string(r[:500])
	}
	a.Record(ctx, ev)
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
	id, err := a.ids.NextID()
	if err != nil {
		return err
	}
	ev.ID, ev.At = id, a.now().UTC()
	if ev.ActorUserID == 0 && ev.ActorKeyID == 0 && ev.ActorName == "" {
		if p, ok := PrincipalFrom(ctx); ok {
			ev.ActorUserID, ev.ActorName = p.UserID, p.Username
			if p.Key != nil {
				ev.ActorKeyID = p.Key.KeyID
			}
		}
	}
	if ev.Result == "" {
		ev.Result = AuditSuccess
	}
	ev.RequestID, ev.IP = RequestID(ctx), ClientIP(ctx)
	return a.store.AppendAudit(ctx, ev)
}
