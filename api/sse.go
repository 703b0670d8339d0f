package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// sseWriter writes Server-Sent Events: `event:`, `id:` and one `data:` line
// per event, flushed at once. The id is the event's place in its task's
// stream (chat.Event.ID), the same on a resumed stream. Headers go out with the first event, so a
// request that fails before streaming still gets a plain JSON error.
type sseWriter struct {
	mu      sync.Mutex
	w       http.ResponseWriter
	rc      *http.ResponseController
	started bool
	err     error // the first write error: the client is gone
}

func newSSEWriter(w http.ResponseWriter) *sseWriter {
	return &sseWriter{w: w, rc: http.NewResponseController(w)}
}

func (s *sseWriter) start() {
	if s.started {
		return
	}
	s.started = true
	h := s.w.Header()
	h.Set("Content-Type", "text/event-stream; charset=utf-8")
	h.Set("Cache-Control", "no-cache")
	h.Set("Connection", "keep-alive")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
	s.w.WriteHeader(http.StatusOK)
}

// event writes one event; data is JSON-encoded unless raw is set. An id
// of 0 writes no id line (an event of this stream only, not of the task's).
func (s *sseWriter) event(id int, name string, data any, raw string) error {
	var payload []byte
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return err
		}
		payload = b
	} else {
		payload = []byte(raw)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	s.start()
	var err error
	if id > 0 {
		_, err = fmt.Fprintf(s.w, "event: %s\nid: %s\ndata: %s\n\n", name, strconv.Itoa(id), payload)
	} else {
		_, err = fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", name, payload)
	}
	if err == nil {
		err = s.rc.Flush()
	}
	s.err = err
	return err
}

// state reports whether the stream started and whether its client is gone.
func (s *sseWriter) state() (started, gone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.started, s.err != nil
}

// ping writes a comment that keeps proxies from closing an idle stream.
func (s *sseWriter) ping() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil || !s.started {
		return s.err
	}
	_, err := fmt.Fprint(s.w, ": ping\n\n")
	if err == nil {
		err = s.rc.Flush()
	}
	s.err = err
	return err
}

// keepAlive pings every interval until the returned stop is called. It uses
// a timer rather than a goroutine per stream: a thousand streams waiting in
// the queue should cost as little memory as possible.
func (s *sseWriter) keepAlive(interval time.Duration) (stop func()) {
	var (
		mu      sync.Mutex
		stopped bool
		timer   *time.Timer
	)
	tick := func() {
		if s.ping() != nil {
			return
		}
		mu.Lock()
		if !stopped {
			timer.Reset(interval)
		}
		mu.Unlock()
	}
	mu.Lock()
	timer = time.AfterFunc(interval, tick)
	mu.Unlock()
	return func() {
		mu.Lock()
		stopped = true
		timer.Stop()
		mu.Unlock()
	}
}
