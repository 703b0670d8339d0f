package scalebench

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
)

func TestFanOutCallsEachStepOnce(t *testing.T) {
	var seen [100]atomic.Int32
	err := fanOut(context.Background(), 3, 0, len(seen), 7, func(_ context.Context, i int) error {
		seen[i].Add(1)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		want := int32(0)
		if i%7 == 0 {
			want = 1
		}
		if got := seen[i].Load(); got != want {
			t.Errorf("fn(%d) called %d times, want %d", i, got, want)
		}
	}
}

// TestFanOutStopsAtFirstError: the first error cancels the calls running
// and no more start; it is what fanOut returns.
func TestFanOutStopsAtFirstError(t *testing.T) {
	const workers, n = 2, 1000
	boom := errors.New("boom")
	var calls atomic.Int32
	err := fanOut(context.Background(), workers, 0, n, 1, func(ctx context.Context, i int) error {
		calls.Add(1)
		if i == 0 {
			return boom
		}
		<-ctx.Done() // the others run until the error cancels them
		return ctx.Err()
	})
	if !errors.Is(err, boom) {
		t.Errorf("fanOut = %v, want %v", err, boom)
	}
	if c := calls.Load(); c > 2*workers {
		t.Errorf("%d calls after the first failed, want at most %d (the running ones and one that started as it failed)", c, 2*workers)
	}
}
