package idempotent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// DefaultResponseTTL is how long a completed response is replayed (DESIGN §10).
const DefaultResponseTTL = 24 * time.Hour

// MaxKeyLen bounds an Idempotency-Key so a client cannot make Redis keys of
// any size.
const MaxKeyLen = 255

// Outcome is what Begin decided for a request carrying an Idempotency-Key.
type Outcome int

const (
	// Proceed: the caller now owns the key and must Complete or Abort it.
	Proceed Outcome = iota + 1
	// Replay: a response is stored for this key and payload; serve it.
	Replay
	// Mismatch: the key was used with another payload (HTTP 422).
	Mismatch
	// InFlight: the first request with this key is still running (HTTP 409).
	InFlight
)

func (o Outcome) String() string {
	switch o {
	case Proceed:
		return "proceed"
	case Replay:
		return "replay"
	case Mismatch:
		return "mismatch"
	case InFlight:
		return "in_flight"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Stored is a response kept for replay. Header should hold only what a
// replay needs (Content-Type, Location), not per-request headers such as
// the request ID or cookies.
type Stored struct {
	Status int
	Header http.Header
	Body   []byte
}

// Responses is the Idempotency-Key store. Keys are per user:
// {prefix}idem:key:{userID}:{Idempotency-Key}.
type Responses struct {
	rdb         redis.UniversalClient
	prefix      string
	inFlightTTL time.Duration
	storeTTL    time.Duration
	opt         options
}

// NewResponses returns a store whose in-flight claims expire after
// inFlightTTL (so a crashed owner does not block the key forever; it should
// exceed the slowest request using a key) and whose completed responses are
// replayed for storeTTL (DefaultResponseTTL in ragent). Both must be at
// least a millisecond.
func NewResponses(rdb redis.UniversalClient, prefix string, inFlightTTL, storeTTL time.Duration, cfg Config) *Responses {
	mustTTLs("response", inFlightTTL, storeTTL)
	return &Responses{rdb: rdb, prefix: prefix, inFlightTTL: inFlightTTL, storeTTL: storeTTL, opt: newOptions(cfg)}
}

// PayloadHash identifies what a request asks for, so that an
// Idempotency-Key reused on another route or with another body is a
// mismatch: sha256 over method, path and Canonical(body).
func PayloadHash(method, path string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(method))
	h.Write([]byte{0})
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(Canonical(body))
	return hex.EncodeToString(h.Sum(nil))
}

func (r *Responses) key(userID, key string) string {
	return r.prefix + "idem:key:" + userID + ":" + key
}

// Begin claims key for the request whose payload hashes to payloadHash, or
// reports what already holds it. With Proceed the caller owns the key and
// must end with Complete (to store the response) or Abort (to let the
// client retry); with Replay the stored response is returned. Errors are
// ErrInvalidKey, or wrap ErrUnavailable when Redis fails.
func (r *Responses) Begin(ctx context.Context, userID, key, payloadHash string) (Outcome, *Stored, error) {
	if key == "" || len(key) > MaxKeyLen {
		return 0, nil, fmt.Errorf("idempotent: key of %d bytes: %w", len(key), ErrInvalidKey)
	}
	res, err := keyBeginScript.Run(ctx, r.rdb, []string{r.key(userID, key)},
		payloadHash, r.inFlightTTL.Milliseconds()).StringSlice()
	if err != nil {
		return 0, nil, r.opt.redisError(ctx, componentKey, "begin key", err)
	}
	outcome, stored, err := decodeBegin(res)
	if err != nil {
		return 0, nil, err
	}
	r.opt.metrics.keyOutcomes.WithLabelValues(outcome.String()).Inc()
	return outcome, stored, nil
}

func decodeBegin(res []string) (Outcome, *Stored, error) {
	if len(res) == 0 {
		return 0, nil, fmt.Errorf("idempotent: begin key: empty reply")
	}
	switch res[0] {
	case "proceed":
		return Proceed, nil, nil
	case "mismatch":
		return Mismatch, nil, nil
	case "in_flight":
		return InFlight, nil, nil
	case "replay":
		if len(res) != 4 {
			return 0, nil, fmt.Errorf("idempotent: begin key: replay reply of %d fields", len(res))
		}
		status, err := strconv.Atoi(res[1])
		if err != nil {
			return 0, nil, fmt.Errorf("idempotent: begin key: stored status %q: %w", res[1], err)
		}
		var header http.Header
		if err := json.Unmarshal([]byte(res[2]), &header); err != nil {
			return 0, nil, fmt.Errorf("idempotent: begin key: stored header: %w", err)
		}
		return Replay, &Stored{Status: status, Header: header, Body: []byte(res[3])}, nil
	}
	return 0, nil, fmt.Errorf("idempotent: begin key: unknown reply %q", res[0])
}

// Complete stores resp as the response for key, replayed for the store TTL.
// It returns ErrNotOwner when the claim had expired and the key was taken
// for another payload or already completed, and an error wrapping
// ErrUnavailable when Redis fails.
func (r *Responses) Complete(ctx context.Context, userID, key, payloadHash string, resp Stored) error {
	header, err := json.Marshal(resp.Header)
	if err != nil {
		return fmt.Errorf("idempotent: complete key: header: %w", err)
	}
	n, err := keyCompleteScript.Run(ctx, r.rdb, []string{r.key(userID, key)},
		payloadHash, resp.Status, header, resp.Body, r.storeTTL.Milliseconds()).Int()
	if err != nil {
		return r.opt.redisError(ctx, componentKey, "complete key", err)
	}
	if n == 0 {
		return fmt.Errorf("idempotent: complete key: %w", ErrNotOwner)
	}
	return nil
}

// Abort drops the caller's in-flight claim on key so that the client can
// retry, e.g. after a 5xx or a cancelled request. It returns ErrNotOwner when
// the claim is no longer the caller's, and an error wrapping ErrUnavailable
// when Redis fails (the claim then expires after the in-flight TTL).
func (r *Responses) Abort(ctx context.Context, userID, key, payloadHash string) error {
	n, err := keyAbortScript.Run(ctx, r.rdb, []string{r.key(userID, key)}, payloadHash).Int()
	if err != nil {
		return r.opt.redisError(ctx, componentKey, "abort key", err)
	}
	if n == 0 {
		return fmt.Errorf("idempotent: abort key: %w", ErrNotOwner)
	}
	return nil
}
