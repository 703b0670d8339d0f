package service

import "context"

// ctxKey is a context key that reads back the type it was stored with; the
// name keeps two keys of one type apart.
type ctxKey[T any] struct{ name string }

func (k ctxKey[T]) with(ctx context.Context, v T) context.Context {
	return context.WithValue(ctx, k, v)
}

func (k ctxKey[T]) from(ctx context.Context) (T, bool) {
	v, ok := ctx.Value(k).(T)
	return v, ok
}

var (
	requestIDKey = ctxKey[string]{"request id"}
	clientIPKey  = ctxKey[string]{"client ip"}
	principalKey = ctxKey[Principal]{"principal"}
	shutdownKey  = ctxKey[context.Context]{"shutdown"}
)

// WithShutdown returns ctx carrying shutdown, a context cancelled (with
// ErrShutdown) when the process begins to shut down: work that outlives
// its request, like an answer whose client went away, stops with it.
func WithShutdown(ctx, shutdown context.Context) context.Context {
	return shutdownKey.with(ctx, shutdown)
}

// Shutdown returns the shutdown context carried by ctx; without one, a
// context never cancelled.
func Shutdown(ctx context.Context) context.Context {
	if s, ok := shutdownKey.from(ctx); ok {
		return s
	}
	return context.Background()
}

// WithRequestID returns ctx carrying the request id, which loggers add to
// every line logged with that context.
func WithRequestID(ctx context.Context, id string) context.Context { return requestIDKey.with(ctx, id) }

// RequestID returns the request id carried by ctx, or "".
func RequestID(ctx context.Context) string {
	id, _ := requestIDKey.from(ctx)
	return id
}

// WithClientIP returns ctx carrying the caller's address as the HTTP layer
// trusts it (the TCP peer, or what a trusted proxy reports).
func WithClientIP(ctx context.Context, ip string) context.Context { return clientIPKey.with(ctx, ip) }

// ClientIP returns the client address carried by ctx, or "".
func ClientIP(ctx context.Context) string {
	ip, _ := clientIPKey.from(ctx)
	return ip
}

// WithPrincipal returns ctx carrying the authenticated caller, which the
// audit log records as the actor of what the request changes.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return principalKey.with(ctx, p)
}

// PrincipalFrom returns the caller carried by ctx.
func PrincipalFrom(ctx context.Context) (Principal, bool) { return principalKey.from(ctx) }
