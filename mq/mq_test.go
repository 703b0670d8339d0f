package mq_test

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/ragent-go/ragent/mq"
)

func TestPermanent(t *testing.T) {
	cause := io.ErrUnexpectedEOF
	tests := []struct {
		name          string
		err           error
		wantPermanent bool
		wantCause     bool
	}{
		{"plain", cause, false, true},
		{"permanent", mq.Permanent(cause), true, true},
		{"wrapped permanent", fmt.Errorf("parse: %w", mq.Permanent(cause)), true, true},
		{"retry later", fmt.Errorf("busy: %w", mq.ErrRetryLater), false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, mq.ErrPermanent); got != tt.wantPermanent {
				t.Errorf("errors.Is(ErrPermanent) = %v, want %v", got, tt.wantPermanent)
			}
			if got := errors.Is(tt.err, cause); got != tt.wantCause {
				t.Errorf("errors.Is(cause) = %v, want %v", got, tt.wantCause)
			}
		})
	}
	if mq.Permanent(nil) != nil {
		t.Error("Permanent(nil) != nil")
	}
	if got := mq.Permanent(cause).Error(); got != cause.Error() {
		t.Errorf("message = %q, want the cause's %q", got, cause.Error())
	}
}
