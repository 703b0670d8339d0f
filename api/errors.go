package api

import (
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// statuses is the one table from domain errors to HTTP. The first match wins,
// so more specific sentinels come first.
var statuses = []struct {
	err    error
	status int
	code   string
}{
	{service.ErrInvalid, http.StatusBadRequest, "invalid"},
	{service.ErrUnauthenticated, http.StatusUnauthorized, "unauthenticated"},
	{service.ErrForbidden, http.StatusForbidden, "forbidden"},
	{service.ErrNotFound, http.StatusNotFound, "not_found"},
	{service.ErrDuplicateRequest, http.StatusConflict, "duplicate_request"},
	{service.ErrConflict, http.StatusConflict, "conflict"},
	{service.ErrTooLarge, http.StatusRequestEntityTooLarge, "too_large"},
	{service.ErrUnsupported, http.StatusUnsupportedMediaType, "unsupported_type"},
	{service.ErrKeyReused, http.StatusUnprocessableEntity, "idempotency_key_reused"},
	{service.ErrBusy, http.StatusTooManyRequests, "busy"},
	{service.ErrUnavailable, http.StatusServiceUnavailable, "unavailable"},
}

// errorBody is the JSON shape of every error response.
type errorBody struct {
	Error errorDetail `json:"error"`
}

type errorDetail struct {
	Code    string            `json:"code"`
	Message string            `json:"message"`
	Details map[string]string `json:"details,omitempty"`
}

// classify returns the status, code and user-facing message for err.
func classify(err error) (status int, detail errorDetail) {
	for _, s := range statuses {
		if errors.Is(err, s.err) {
			detail = errorDetail{Code: s.code, Message: err.Error()}
			var de *service.Error
			if errors.As(err, &de) {
				detail.Details = de.Details
			}
			return s.status, detail
		}
	}
	return http.StatusInternalServerError, errorDetail{Code: "internal", Message: "internal server error"}
}

// fail writes err as a JSON error response and aborts the chain. Unknown
// errors are logged once here, with the request id, and their text hidden.
func fail(c *gin.Context, err error) {
	status, detail := classify(err)
	switch {
	case status >= 500 && status != http.StatusServiceUnavailable:
		logger(c).ErrorContext(c.Request.Context(), "request failed", "err", err)
	case status == http.StatusServiceUnavailable:
		logger(c).WarnContext(c.Request.Context(), "dependency unavailable", "err", err)
	}
	if status == http.StatusTooManyRequests && c.Writer.Header().Get("Retry-After") == "" {
		seconds := 1
		var de *service.Error
		if errors.As(err, &de) && de.RetryAfter > 0 {
			seconds = int(math.Ceil(de.RetryAfter.Seconds()))
		}
		c.Header("Retry-After", strconv.Itoa(seconds))
	}
	c.AbortWithStatusJSON(status, errorBody{Error: detail})
}

// failCode writes an error with an explicit status and code.
func failCode(c *gin.Context, status int, code, message string) {
	c.AbortWithStatusJSON(status, errorBody{Error: errorDetail{Code: code, Message: message}})
}

func logger(c *gin.Context) *slog.Logger {
	if l, ok := c.Get(ctxLogger); ok {
		return l.(*slog.Logger)
	}
	return slog.Default()
}
