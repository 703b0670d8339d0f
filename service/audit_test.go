package service

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

// fakeTx runs fn with a context marked as inside the transaction and
// records what was appended in it and outside it.
type fakeTx struct {
	inTx, outside []AuditEvent
	failAppend    bool
	cancelledSeen bool
}

type inTxKey struct{}

func (f *fakeTx) InTx(ctx context.Context, fn func(ctx context.Context) error) error {
	return fn(context.WithValue(ctx, inTxKey{}, true))
}

func (f *fakeTx) AppendAudit(ctx context.Context, e *AuditEvent) error {
	if ctx.Err() != nil {
		f.cancelledSeen = true
		return ctx.Err()
	}
	if f.failAppend {
		return errors.New("insert refused")
	}
	if ctx.Value(inTxKey{}) != nil {
		f.inTx = append(f.inTx, *e)
	} else {
		f.outside = append(f.outside, *e)
	}
	return nil
}

type seqIDs struct{ n ID }

func (s *seqIDs) NextID() (ID, error) { s.n++; return s.n, nil }

func TestAuditorDo(t *testing.T) {
	ctx := WithClientIP(WithRequestID(WithPrincipal(context.Background(), Principal{UserID: 7, Username: "ann"}), "req-1"), "203.0.113.5")
	for _, tt := range []struct {
		name       string
		change     error
		failAppend bool
		wantErr    bool
		inTx       int
		outside    AuditResult // "" for none
	}{
		{"success is recorded in the transaction", nil, false, false, 1, ""},
		{"a refusal is recorded after the rollback", Errorf(ErrForbidden, "no"), false, true, 0, AuditDenied},
		{"an unexpected error is recorded as failed", errors.New("disk on fire"), false, true, 0, AuditFailed},
		{"an event that cannot be written fails the change", nil, true, true, 0, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeTx{failAppend: tt.failAppend}
			a := NewAuditor(f, f, &seqIDs{}, AuditorConfig{})
			changed := false
			err := a.Do(ctx, AuditEvent{Action: AuditGroupCreate}, func(ctx context.Context, ev *AuditEvent) error {
				changed = ctx.Value(inTxKey{}) != nil
				ev.TargetID = "42"
				return tt.change
			})
			if (err != nil) != tt.wantErr || !changed {
				t.Fatalf("err %v, change ran in the transaction: %v", err, changed)
			}
			if len(f.inTx) != tt.inTx {
				t.Fatalf("in the transaction: %+v", f.inTx)
			}
			if tt.outside == "" && len(f.outside) != 0 || tt.outside != "" && (len(f.outside) != 1 || f.outside[0].Result != tt.outside) {
				t.Fatalf("outside the transaction: %+v, want %q", f.outside, tt.outside)
			}
			for _, e := range append(f.inTx, f.outside...) {
				if e.ActorUserID != 7 || e.ActorName != "ann" || e.RequestID != "req-1" || e.IP != "203.0.113.5" || e.TargetID != "42" || e.ID == 0 {
					t.Fatalf("event %+v", e)
				}
			}
		})
	}
}

func TestAuditRecordOutlivesTheClient(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	f := &fakeTx{}
	NewAuditor(f, f, &seqIDs{}, AuditorConfig{}).Fail(ctx, AuditEvent{Action: AuditLogin, TargetID: "bob"}, Errorf(ErrBusy, "wait"))
	if f.cancelledSeen || len(f.outside) != 1 || f.outside[0].Result != AuditLocked {
		t.Fatalf("events %+v (cancelled context seen: %v)", f.outside, f.cancelledSeen)
	}
}

func TestAuditResultOf(t *testing.T) {
	for err, want := range map[error]AuditResult{
		nil:                             AuditSuccess,
		ErrForbidden:                    AuditDenied,
		ErrUnauthenticated:              AuditDenied,
		fmt.Errorf("x: %w", ErrInvalid): AuditInvalid,
		ErrTooLarge:                     AuditInvalid,
		ErrNotFound:                     AuditNotFound,
		ErrConflict:                     AuditConflict,
		ErrBusy:                         AuditLocked,
		ErrUnavailable:                  AuditFailed,
	} {
		if got := AuditResultOf(err); got != want || !got.Valid() {
			t.Errorf("%v: %s, want %s", err, got, want)
		}
	}
}

// An API key's action names the key as well as its owner.
func TestAuditActorIsTheKey(t *testing.T) {
	key := Principal{UserID: 7, Username: "ann", Key: &KeyGrant{KeyID: 42, Scopes: []Scope{ScopeIngest}}}
	for _, tt := range []struct {
		name    string
		p       Principal
		wantKey ID
	}{
		{"a person", Principal{UserID: 7, Username: "ann"}, 0},
		{"a key", key, 42},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeTx{}
			NewAuditor(f, f, &seqIDs{}, AuditorConfig{}).Record(WithPrincipal(context.Background(), tt.p), AuditEvent{Action: AuditDocumentUpload})
			if len(f.outside) != 1 {
				t.Fatalf("%d events, want 1", len(f.outside))
			}
			if e := f.outside[0]; e.ActorUserID != 7 || e.ActorKeyID != tt.wantKey {
				t.Errorf("actor user %v key %v, want 7 and %v", e.ActorUserID, e.ActorKeyID, tt.wantKey)
			}
		})
	}
}
