package service

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Adapters wrap driver errors into these with %w; CodeOf
// names them for clients, and api maps the codes to HTTP statuses.
var (
	ErrInvalid          = errors.New("invalid")                                     // 400
	ErrUnauthenticated  = errors.New("unauthenticated")                             // 401
	ErrForbidden        = errors.New("forbidden")                                   // 403
	ErrNotFound         = errors.New("not found")                                   // 404
	ErrConflict         = errors.New("conflict")                                    // 409
	ErrDuplicateRequest = errors.New("duplicate request")                           // 409, idempotent submit
	ErrTooLarge         = errors.New("too large")                                   // 413
	ErrUnsupported      = errors.New("unsupported type")                            // 415
	ErrKeyReused        = errors.New("idempotency key reused with another payload") // 422
	ErrBusy             = errors.New("busy")                                        // 429
	ErrQuotaExceeded    = errors.New("quota exceeded")                              // 429, a usage quota
	ErrUnavailable      = errors.New("unavailable")                                 // 503
)

// ErrPermanent marks a failure that retrying the same work cannot fix: the
// database refused the data itself (a value too long for an index row, an
// invalid byte sequence, a number out of range). It is wrapped together with
// the sentinel that gives the failure its API status (ErrInvalid), so a
// background consumer can fail the work at once instead of retrying it.
var ErrPermanent = errors.New("permanent failure")

// ErrModelUnavailable wraps the ErrUnavailable of a failed model call, so
// the chat stream names it "llm_unavailable" rather than "unavailable".
var ErrModelUnavailable = fmt.Errorf("model %w", ErrUnavailable)

// ErrSearchUnavailable wraps the ErrUnavailable of an external search
// engine (OpenSearch) that did not answer, so a search fails with
// "search_unavailable" instead of returning an empty list.
var ErrSearchUnavailable = fmt.Errorf("search engine %w", ErrUnavailable)

// ErrStopped is the cause of a generation stopped by a user (the task
// registry's stop wraps it), told apart from a disconnect and ErrShutdown.
var ErrStopped = errors.New("stopped by the user")

// ErrShutdown is the cancel cause of work interrupted because the process is
// shutting down (not because a client went away).
var ErrShutdown = errors.New("shutting down")

// Error is a domain error with a message fit for users and optional details
// (e.g. the id of the existing document on a duplicate upload).
type Error struct {
	Kind    error // one of the sentinels above
	Message string
	Details map[string]string
	// RetryAfter, on an ErrBusy or ErrUnavailable refusal, is when the
	// client may try again (sent as the Retry-After header).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Kind.Error()
	}
	return e.Message
}

func (e *Error) Unwrap() error { return e.Kind }

// Errorf returns an *Error of the given kind with a formatted message.
func Errorf(kind error, format string, args ...any) error {
	return &Error{Kind: kind, Message: fmt.Sprintf(format, args...)}
}

// TooLarge is the one "too large" error: an ErrTooLarge naming what passed
// which limit, in bytes ("request body exceeds 1048576 bytes").
func TooLarge(what string, limit int64) error {
	return Errorf(ErrTooLarge, "%s exceeds %d bytes", what, limit)
}

// UploadTooLarge is the one upload-limit message, the same whether the API
// refuses the upload before reading it or ingestion counts its bytes.
func UploadTooLarge(limit int64) error {
	return Errorf(ErrTooLarge, "file exceeds the %d MiB upload limit", limit>>20)
}

// WithDetails returns an *Error of the given kind carrying details.
func WithDetails(kind error, msg string, details map[string]string) error {
	return &Error{Kind: kind, Message: msg, Details: details}
}

// codes is the one table from domain errors to the codes clients read: in
// JSON error bodies (api maps each code to an HTTP status) and in the chat
// stream's reject and error events. The first match wins, so more specific
// sentinels come first.
var codes = []struct {
	err  error
	code string
}{
	{ErrInvalid, "invalid"},
	{ErrUnauthenticated, "unauthenticated"},
	{ErrForbidden, "forbidden"},
	{ErrNotFound, "not_found"},
	{ErrDuplicateRequest, "duplicate_request"},
	{ErrConflict, "conflict"},
	{ErrTooLarge, "too_large"},
	{ErrUnsupported, "unsupported_type"},
	{ErrKeyReused, "idempotency_key_reused"},
	{ErrBusy, "busy"},
	{ErrQuotaExceeded, "quota_exceeded"},
	{ErrModelUnavailable, "llm_unavailable"},
	{ErrSearchUnavailable, "search_unavailable"},
	{ErrUnavailable, "unavailable"},
}

// CodeInternal is the code of every error that is none of the sentinels;
// its text is not shown to clients.
const CodeInternal = "internal"

// CodeOf returns the client-facing code of err (CodeInternal when err wraps
// no sentinel).
func CodeOf(err error) string {
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return c.code
		}
	}
	return CodeInternal
}
