package llm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		header string
		want   time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{" 0 ", 0},
		{"-4", 0},
		{now.Add(5 * time.Second).Format(http.TimeFormat), 5 * time.Second},
		{now.Add(-5 * time.Second).Format(http.TimeFormat), 0},
		{"soon", 0},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.header, now); got != tt.want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", tt.header, got, tt.want)
		}
	}
}

func TestRetrierDelay(t *testing.T) {
	r := retrier{max: 3, base: 100 * time.Millisecond, cap: 300 * time.Millisecond, now: time.Now}
	conn := &connError{errors.New("connection reset")}
	tests := []struct {
		name     string
		attempt  int
		err      error
		min, max time.Duration
		retry    bool
	}{
		{"connection error, first retry", 0, conn, 50 * time.Millisecond, 100 * time.Millisecond, true},
		{"connection error, backoff doubles", 1, conn, 100 * time.Millisecond, 200 * time.Millisecond, true},
		{"backoff is capped", 2, conn, 150 * time.Millisecond, 300 * time.Millisecond, true},
		{"retries spent", 3, conn, 0, 0, false},
		{"429 honours Retry-After", 0, &statusError{code: 429, retryAfter: 2 * time.Second}, 2 * time.Second, 2200 * time.Millisecond, true},
		{"503 without header backs off", 0, &statusError{code: 503}, 50 * time.Millisecond, 100 * time.Millisecond, true},
		{"Retry-After beyond the cap gives up", 0, &statusError{code: 429, retryAfter: time.Hour}, 0, 0, false},
		{"404 is final", 0, &statusError{code: 404}, 0, 0, false},
		{"a protocol error is final", 0, errors.New("bad json"), 0, 0, false},
		{"a wrapped connection error", 0, fmt.Errorf("call: %w", conn), 50 * time.Millisecond, 100 * time.Millisecond, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for range 20 { // the jitter is random; sample it
				d, ok := r.delay(tt.attempt, tt.err)
				if ok != tt.retry || d < tt.min || d > tt.max {
					t.Fatalf("delay = %v, %v; want %v in [%v, %v]", d, ok, tt.retry, tt.min, tt.max)
				}
			}
		})
	}
}

func TestRetrierStopsOnCancel(t *testing.T) {
	r := retrier{max: 5, base: time.Second, cap: time.Second, now: time.Now}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	calls := 0
	start := time.Now()
	err := r.do(ctx, func() (bool, error) {
		calls++
		return true, &connError{errors.New("refused")}
	})
	if !errors.Is(err, context.DeadlineExceeded) || calls != 1 || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("err = %v after %d calls and %v", err, calls, time.Since(start))
	}
}
