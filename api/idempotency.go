package api

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/idempotent"
	"github.com/ragent-go/ragent/service"
)

// Headers of idempotent submit (DESIGN §10).
const (
	IdempotencyKeyHeader = "Idempotency-Key"
	ReplayedHeader       = "Idempotent-Replayed"
)

// maxStoredResponse bounds a response kept for Idempotency-Key replay; a
// larger one is served but not stored, so a retry runs again.
const maxStoredResponse = 1 << 20

// idemTimeout bounds the Redis calls that end a guarded request, which run
// detached from the request's context so a client that hung up still
// releases its lock and settles its key.
const idemTimeout = 2 * time.Second

// submitLock refuses an identical request (same path, user and canonical
// body) while one is in flight: 409 duplicate_request. It only locks and
// never buffers the response, so it suits streamed answers (chat SSE).
// authenticate must run before it.
func (s *Server) submitLock(c *gin.Context) {
	if s.deps.Locks == nil {
		c.Next()
		return
	}
	body, ok := s.readBody(c)
	if !ok {
		return
	}
	if release, ok := s.lockSubmit(c, body, nil); ok {
		defer release()
		c.Next()
	}
}

// idempotent is submitLock plus the Idempotency-Key contract: the first
// completed response for a key is stored and replayed with
// Idempotent-Replayed: true; the key with another payload is 422; the key
// while its first request still runs is 409. For JSON endpoints whose
// responses are small, behind a guard that checks the caller's right to the
// route before it (requireAdmin); authenticate must run before it.
func (s *Server) idempotent(c *gin.Context) { s.serveIdempotent(c, nil) }

// idempotentAfter is idempotent for a route whose use case checks access
// itself: allowed runs before a stored response is replayed, so a caller who
// lost the right since (a manager removed from the knowledge base) gets the
// refusal the route would give now, never the stored answer. Requests that
// are not replays are checked by the use case, once.
func (s *Server) idempotentAfter(allowed func(c *gin.Context) error) gin.HandlerFunc {
	return func(c *gin.Context) { s.serveIdempotent(c, allowed) }
}

// kbRole is an idempotentAfter check: the caller holds at least need on the
// path's knowledge base (404 when they cannot read it, 403 below need).
func (s *Server) kbRole(need service.KBRole) func(c *gin.Context) error {
	return func(c *gin.Context) error {
		id, err := service.ParseID(c.Param("id"))
		if err != nil {
			return err
		}
		return s.deps.KnowledgeBases.Require(c.Request.Context(), principal(c), id, need)
	}
}

// adminOnly is an idempotentAfter check for what only admins do.
func adminOnly(c *gin.Context) error {
	if !principal(c).IsAdmin() {
		return service.Errorf(service.ErrForbidden, "admin role required")
	}
	return nil
}

func (s *Server) serveIdempotent(c *gin.Context, allowed func(c *gin.Context) error) {
	if s.deps.Locks == nil && s.deps.Responses == nil {
		c.Next()
		return
	}
	body, ok := s.readBody(c)
	if !ok {
		return
	}
	claim, ok := s.claimKey(c, body, allowed)
	if !ok {
		return
	}
	release, ok := s.lockSubmit(c, body, claim)
	if !ok {
		return
	}
	defer release()
	if claim == nil {
		c.Next()
		return
	}
	s.serveAndSettle(c, claim)
}

// keyClaim is an Idempotency-Key this request owns until it completes or
// aborts it.
type keyClaim struct{ user, key, hash string }

// claimKey begins the request's Idempotency-Key, if it has one. It answers
// a replay (once allowed passes), a reused key or a key in flight itself
// (ok false); a nil claim with ok means serve without replay (no key, or
// Redis unreachable).
func (s *Server) claimKey(c *gin.Context, body []byte, allowed func(c *gin.Context) error) (claim *keyClaim, ok bool) {
	key := c.GetHeader(IdempotencyKeyHeader)
	if key == "" || s.deps.Responses == nil {
		return nil, true
	}
	ctx := c.Request.Context()
	user := principal(c).UserID.String()
	hash := idempotent.PayloadHash(c.Request.Method, c.Request.URL.Path, body)
	outcome, stored, err := s.deps.Responses.Begin(ctx, user, key, hash)
	switch {
	case errors.Is(err, idempotent.ErrInvalidKey):
		fail(c, service.Errorf(service.ErrInvalid, "%s must be 1 to %d bytes", IdempotencyKeyHeader, idempotent.MaxKeyLen))
	case err != nil:
		// Redis is unreachable (counted by the idempotent package): serve
		// the request without replay; the database's unique keys remain.
		logger(c).WarnContext(ctx, "idempotency keys unavailable; serving without replay", "err", err)
		return nil, true
	case outcome == idempotent.Replay && allowed != nil:
		if err := allowed(c); err != nil {
			fail(c, err)
			return nil, false
		}
		writeStored(c, stored)
	case outcome == idempotent.Replay:
		writeStored(c, stored)
	case outcome == idempotent.Mismatch:
		fail(c, service.Errorf(service.ErrKeyReused, "%s %q was already used with another request", IdempotencyKeyHeader, key))
	case outcome == idempotent.InFlight:
		fail(c, service.Errorf(service.ErrDuplicateRequest, "the first request with this %s is still being processed", IdempotencyKeyHeader))
	default:
		return &keyClaim{user: user, key: key, hash: hash}, true
	}
	return nil, false
}

// lockSubmit takes the submit lock of an identical request. When one is in
// flight it answers 409 (freeing claim) and returns ok false; release frees
// the lock (a no-op when there are no locks or Redis is unreachable).
func (s *Server) lockSubmit(c *gin.Context, body []byte, claim *keyClaim) (release func(), ok bool) {
	noop := func() {}
	if s.deps.Locks == nil {
		return noop, true
	}
	ctx := c.Request.Context()
	lock, err := s.deps.Locks.AcquireSubmit(ctx, c.Request.URL.Path, principal(c).UserID.String(), body)
	switch {
	case errors.Is(err, idempotent.ErrLocked):
		if claim != nil {
			s.settleKey(c, claim, nil)
		}
		fail(c, service.Errorf(service.ErrDuplicateRequest, "an identical request is already being processed"))
		return nil, false
	case err != nil:
		logger(c).WarnContext(ctx, "submit locks unavailable; serving without the duplicate guard", "err", err)
		return noop, true
	}
	return func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), idemTimeout)
		defer cancel()
		if err := lock.Release(rctx); err != nil {
			logger(c).WarnContext(ctx, "submit lock release failed; it expires by itself", "key", lock.Key(), "err", err)
		}
	}, true
}

// serveAndSettle runs the handler, recording its response, and completes
// claim with it (or aborts claim, so a retry runs again).
func (s *Server) serveAndSettle(c *gin.Context, claim *keyClaim) {
	rec := &recorder{ResponseWriter: c.Writer}
	c.Writer = rec
	settled := false
	defer func() {
		if !settled { // the handler panicked: let the client retry
			s.settleKey(c, claim, nil)
		}
	}()
	c.Next()
	settled = true
	// What the client got is what a replay gets, so send a status the
	// handler set without a body now.
	rec.WriteHeaderNow()
	// 2xx and 4xx are the request's answer and are replayed; a 5xx (or a
	// response too large to keep) frees the key for a retry.
	if status := rec.Status(); status < 500 && !rec.overflow {
		s.settleKey(c, claim, &idempotent.Stored{Status: status, Header: replayHeader(rec.Header()), Body: rec.buf.Bytes()})
	} else {
		s.settleKey(c, claim, nil)
	}
}

// settleKey completes the claim with resp, or aborts it when resp is nil.
func (s *Server) settleKey(c *gin.Context, k *keyClaim, resp *idempotent.Stored) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Request.Context()), idemTimeout)
	defer cancel()
	op, err := "abort", error(nil)
	if resp != nil {
		op, err = "complete", s.deps.Responses.Complete(ctx, k.user, k.key, k.hash, *resp)
	} else {
		err = s.deps.Responses.Abort(ctx, k.user, k.key, k.hash)
	}
	if err != nil {
		logger(c).WarnContext(c.Request.Context(), "idempotency key "+op+" failed", "err", err)
	}
}

// readBody reads the capped body for hashing and puts it back for the handler.
func (s *Server) readBody(c *gin.Context) ([]byte, bool) {
	tooLarge := func() {
		fail(c, service.TooLarge("request body", s.deps.MaxBodyBytes))
	}
	if c.Request.ContentLength > s.deps.MaxBodyBytes {
		tooLarge()
		return nil, false
	}
	b, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, s.deps.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			tooLarge()
		} else {
			failCode(c, http.StatusBadRequest, "invalid", "could not read the request body")
		}
		return nil, false
	}
	c.Request.Body = io.NopCloser(bytes.NewReader(b))
	return b, true
}

// replayHeader keeps what a replay needs, never per-request headers such as
// the request id or cookies.
func replayHeader(h http.Header) http.Header {
	out := http.Header{}
	for _, k := range []string{"Content-Type", "Location"} {
		if v := h.Values(k); len(v) > 0 {
			out[k] = v
		}
	}
	return out
}

func writeStored(c *gin.Context, r *idempotent.Stored) {
	for k, v := range replayHeader(r.Header) {
		c.Writer.Header()[k] = v
	}
	c.Header(ReplayedHeader, "true")
	c.Status(r.Status)
	_, _ = c.Writer.Write(r.Body)
	c.Abort()
}

// recorder passes a response through and keeps a copy for replay.
type recorder struct {
	gin.ResponseWriter
	buf      bytes.Buffer
	overflow bool
}

func (r *recorder) record(b []byte) {
	if r.overflow || r.buf.Len()+len(b) > maxStoredResponse {
		r.overflow = true
		return
	}
	r.buf.Write(b)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.record(b)
	return r.ResponseWriter.Write(b)
}

func (r *recorder) WriteString(s string) (int, error) {
	r.record([]byte(s))
	return r.ResponseWriter.WriteString(s)
}
