package api

import (
	"cmp"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// statuses maps the codes of service.CodeOf to HTTP statuses: the code is
// the domain's, the status is HTTP's and so belongs here.
var statuses = map[string]int{
	"invalid":                http.StatusBadRequest,
	"unauthenticated":        http.StatusUnauthorized,
	"forbidden":              http.StatusForbidden,
	"not_found":              http.StatusNotFound,
	"duplicate_request":      http.StatusConflict,
	"conflict":               http.StatusConflict,
	"too_large":              http.StatusRequestEntityTooLarge,
	"unsupported_type":       http.StatusUnsupportedMediaType,
	"idempotency_key_reused": http.StatusUnprocessableEntity,
	"busy":                   http.StatusTooManyRequests,
	"quota_exceeded":         http.StatusTooManyRequests,
	"llm_unavailable":        http.StatusServiceUnavailable,
	"search_unavailable":     http.StatusServiceUnavailable,
	"unavailable":            http.StatusServiceUnavailable,
}

// serverMessages are the stable messages of 5xx answers, by code: an
// error's own text there is about ragent's insides (a dependency's address,
// the driver's error, an upstream's body), so fail logs it and the client
// reads only the code and this.
var serverMessages = map[string]string{
	"llm_unavailable":    "the model service is unavailable; try again shortly",
	"search_unavailable": "the search engine is unavailable; try again shortly",
	"unavailable":        "a service ragent depends on is unavailable; try again shortly",
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
	code := service.CodeOf(err)
	status, ok := statuses[code]
	if !ok {
		return http.StatusInternalServerError, errorDetail{Code: service.CodeInternal, Message: "internal server error"}
	}
	if status >= 500 {
		return status, errorDetail{Code: code, Message: cmp.Or(serverMessages[code], "the service is unavailable; try again shortly")}
	}
	detail = errorDetail{Code: code, Message: err.Error()}
	var de *service.Error
	if errors.As(err, &de) {
		detail.Details = de.Details
	}
	return status, detail
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
	var de *service.Error
	retry := errors.As(err, &de) && de.RetryAfter > 0
	if (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable || retry) && c.Writer.Header().Get("Retry-After") == "" {
		seconds := defaultRetryAfter(status)
		if retry {
			seconds = int(math.Ceil(de.RetryAfter.Seconds()))
		}
		c.Header("Retry-After", strconv.Itoa(seconds))
	}
	if openAIRoute(c) {
		failOpenAI(c, status, openAICode(err, detail.Code), detail.Message)
		return
	}
	c.AbortWithStatusJSON(status, errorBody{Error: detail})
}

// unavailableRetryAfter is the Retry-After of a 503 whose error names no
// wait of its own: a dependency that went away (Redis, Postgres, the MQ) is
// usually back, or failed over, within seconds, and clients (OpenAI's SDKs
// among them) retry after the header rather than at once.
const unavailableRetryAfter = 5

// defaultRetryAfter is the Retry-After, in seconds, of a refusal with status
// whose error does not carry one: a second for a 429, unavailableRetryAfter
// for a 503.
func defaultRetryAfter(status int) int {
	if status == http.StatusServiceUnavailable {
		return unavailableRetryAfter
	}
	return 1
}

// failCode writes an error with an explicit status and code.
func failCode(c *gin.Context, status int, code, message string) {
	if openAIRoute(c) {
		failOpenAI(c, status, code, message)
		return
	}
	c.AbortWithStatusJSON(status, errorBody{Error: errorDetail{Code: code, Message: message}})
}

func logger(c *gin.Context) *slog.Logger {
	if l, ok := c.Get(ctxLogger); ok {
		return l.(*slog.Logger)
	}
	return slog.Default()
}
