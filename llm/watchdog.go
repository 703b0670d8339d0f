package llm

import (
	"fmt"
	"sync/atomic"
	"time"
)

// timeouts bound a chat stream's silences.
type timeouts struct {
	firstToken time.Duration // from sending the request to the first token
	idle       time.Duration // between two tokens
}

// timeoutError is a stream that went silent. The same endpoint is not
// retried (the wait already spent the caller's patience), but a failover
// chain moves on to the next endpoint when no token was sent yet.
type timeoutError struct{ msg string }

func (e *timeoutError) Error() string { return e.msg }

// watchdog is one timer over a stream: first for the first token, then
// reset on every token for the gap to the next. Firing calls cancel, which
// aborts the request and unblocks whatever reads it — ragent's own scanner
// or langchaingo's.
type watchdog struct {
	t        timeouts
	timer    *time.Timer
	gotToken atomic.Bool
	fired    atomic.Bool
}

func startWatchdog(t timeouts, cancel func()) *watchdog {
	w := &watchdog{t: t}
	w.timer = time.AfterFunc(t.firstToken, func() {
		w.fired.Store(true)
		cancel()
	})
	return w
}

// token records a token and restarts the wait for the next one.
func (w *watchdog) token() {
	w.gotToken.Store(true)
	w.timer.Reset(w.t.idle)
}

func (w *watchdog) stop() { w.timer.Stop() }

// timedOut reports whether the watchdog fired.
func (w *watchdog) timedOut() bool { return w.fired.Load() }

// err describes the silence that fired the watchdog.
func (w *watchdog) err() error {
	if w.gotToken.Load() {
		return &timeoutError{fmt.Sprintf("no token for %s", w.t.idle)}
	}
	return &timeoutError{fmt.Sprintf("no first token within %s", w.t.firstToken)}
}
