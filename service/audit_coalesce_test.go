package service

import (
	"context"
	"strings"
	"testing"
	"time"
)

// Refusals of one kind by one principal within the window share two rows:
// the first at once, a summary with the count when the window ends. Other
// principals and kinds are written apart.
func TestAuditorCoalescesRefusals(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := &fakeTx{}
	a := NewAuditor(f, f, &seqIDs{}, AuditorConfig{Now: func() time.Time { return now }, CoalesceWindow: time.Minute})
	ann := WithPrincipal(context.Background(), Principal{UserID: 7, Username: "ann"})
	bob := WithPrincipal(context.Background(), Principal{UserID: 8, Username: "bob"})
	refuse := func(ctx context.Context, action, rid string) {
		a.Fail(WithRequestID(ctx, rid), AuditEvent{Action: action, TargetID: rid}, Errorf(ErrForbidden, "no"))
	}
	for i := range 50 {
		refuse(ann, AuditUserCreate, "ann-"+string(rune('a'+i%26)))
	}
	refuse(bob, AuditUserCreate, "bob-1")
	refuse(ann, AuditUserDelete, "ann-delete")
	if len(f.outside) != 3 {
		t.Fatalf("%d rows for 52 refusals in the window, want 3 (ann's first, bob's, ann's other kind)", len(f.outside))
	}
	now = now.Add(time.Minute)
	a.flush(context.Background(), false)
	if len(f.outside) != 4 {
		t.Fatalf("%d rows after the window, want 4", len(f.outside))
	}
	summary := f.outside[3]
	if summary.ActorUserID != 7 || summary.Result != AuditDenied || !strings.HasPrefix(summary.Detail, "49 more like this since 2026-01-01T00:00:00Z") || summary.RequestID != "ann-x" {
		t.Fatalf("summary %+v", summary)
	}
	// A new window starts with a row of its own again.
	refuse(ann, AuditUserCreate, "ann-next")
	if len(f.outside) != 5 || f.outside[4].RequestID != "ann-next" {
		t.Fatalf("rows %+v", f.outside[4:])
	}
	// Anonymous refusals (failed sign-ins) coalesce per client address.
	for _, ip := range []string{"203.0.113.1", "203.0.113.1", "203.0.113.2"} {
		a.Fail(WithClientIP(context.Background(), ip), AuditEvent{Action: AuditLogin, TargetID: "x"}, Errorf(ErrUnauthenticated, "bad"))
	}
	if len(f.outside) != 7 {
		t.Fatalf("%d rows, want 7 (one per address)", len(f.outside))
	}
	// Shutdown writes out open windows.
	a.flush(context.Background(), true)
	if last := f.outside[len(f.outside)-1]; len(f.outside) != 8 || last.IP != "203.0.113.1" || !strings.HasPrefix(last.Detail, "1 more like this") {
		t.Fatalf("rows after the final flush: %+v", f.outside[7:])
	}
}
