package admin

import (
	"errors"
	"fmt"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// A store's conflict on a write names the taken name; its not-found names
// the id; anything else passes as it is, through both mappings in the order
// create and update apply them.
func TestNameTakenThenNotFound(t *testing.T) {
	boom := errors.New("boom")
	for _, tt := range []struct {
		name      string
		err       error
		kind      error
		message   string
		unchanged bool
	}{
		{"conflict", fmt.Errorf("store: %w", service.ErrConflict), service.ErrConflict, `a group named "ops" exists`, false},
		{"not found", fmt.Errorf("store: %w", service.ErrNotFound), service.ErrNotFound, "group 7 not found", false},
		{"other", boom, boom, "boom", true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := groupNotFound(nameTaken(tt.err, "group", "ops"), 7)
			if !errors.Is(got, tt.kind) {
				t.Fatalf("%v is not %v", got, tt.kind)
			}
			if tt.unchanged && got != tt.err {
				t.Fatalf("%v changed into %v", tt.err, got)
			}
			msg := got.Error()
			var se *service.Error
			if errors.As(got, &se) {
				msg = se.Message
			}
			if msg != tt.message {
				t.Fatalf("message %q, want %q", msg, tt.message)
			}
		})
	}
	if got := nameTaken(nil, "group", "ops"); got != nil {
		t.Fatalf("nil became %v", got)
	}
}
