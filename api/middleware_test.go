package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// A panicking handler answers a JSON 500 with the request id and logs the
// panic with its stack; the server keeps serving.
func TestRecoveryAnswersJSONAndLogs(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(requestID(log), recovery())
	r.GET("/boom", func(*gin.Context) { panic("kaboom") })
	r.GET("/ok", func(c *gin.Context) { c.String(http.StatusOK, "ok") })

	w := httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("GET", "/boom", nil))
	var body errorBody
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil || w.Code != http.StatusInternalServerError || body.Error.Code != "internal" {
		t.Fatalf("panic answered %d %q", w.Code, w.Body.String())
	}
	if strings.Contains(w.Body.String(), "kaboom") {
		t.Fatal("the panic value leaked into the response")
	}
	if !strings.Contains(logs.String(), "kaboom") || !strings.Contains(logs.String(), "stack") {
		t.Fatalf("panic not logged with its stack: %s", logs.String())
	}
	w = httptest.NewRecorder()
	r.ServeHTTP(w, httptest.NewRequest("GET", "/ok", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("after a panic: %d", w.Code)
	}
}

// The status table: every sentinel maps to its status and code; unknown
// errors are 500 with the message hidden; details travel.
func TestClassify(t *testing.T) {
	tests := []struct {
		err    error
		status int
		code   string
	}{
		{service.ErrInvalid, 400, "invalid"},
		{service.ErrUnauthenticated, 401, "unauthenticated"},
		{service.ErrForbidden, 403, "forbidden"},
		{service.ErrNotFound, 404, "not_found"},
		{service.ErrDuplicateRequest, 409, "duplicate_request"},
		{service.ErrConflict, 409, "conflict"},
		{service.ErrTooLarge, 413, "too_large"},
		{service.ErrUnsupported, 415, "unsupported_type"},
		{service.ErrKeyReused, 422, "idempotency_key_reused"},
		{service.ErrBusy, 429, "busy"},
		{service.ErrUnavailable, 503, "unavailable"},
		{fmt.Errorf("%w: %w", service.ErrModelUnavailable, service.ErrUnavailable), 503, "llm_unavailable"},
		{fmt.Errorf("%w: connection refused", service.ErrSearchUnavailable), 503, "search_unavailable"},
		{errSecret, 500, "internal"},
	}
	for _, tt := range tests {
		status, d := classify(tt.err)
		if status != tt.status || d.Code != tt.code {
			t.Errorf("%v → %d %s, want %d %s", tt.err, status, d.Code, tt.status, tt.code)
		}
	}
	if _, d := classify(errSecret); strings.Contains(d.Message, "password") {
		t.Errorf("an unknown error's message is shown: %q", d.Message)
	}
	_, d := classify(service.WithDetails(service.ErrConflict, "exists", map[string]string{"documentId": "42"}))
	if d.Details["documentId"] != "42" || d.Message != "exists" {
		t.Errorf("details %+v", d)
	}
}

var errSecret = errMessage("db password=hunter2 rejected")

type errMessage string

func (e errMessage) Error() string { return string(e) }

// queryID leaves the field alone without the parameter, sets it from a
// valid id, and answers a 400 naming the parameter for anything else.
func TestQueryID(t *testing.T) {
	gin.SetMode(gin.ReleaseMode)
	for _, tt := range []struct {
		query  string
		want   service.ID
		status int // 0: nothing written
	}{
		{"", 5, 0}, {"actor=12", 12, 0}, {"actor=x", 5, http.StatusBadRequest}, {"actor=-3", 5, http.StatusBadRequest},
	} {
		w := httptest.NewRecorder()
		c, _ := gin.CreateTestContext(w)
		c.Request = httptest.NewRequest("GET", "/audit?"+tt.query, nil)
		id := service.ID(5)
		ok := queryID(c, "actor", "a user id", &id)
		if ok != (tt.status == 0) || id != tt.want || tt.status != 0 && (w.Code != tt.status || !strings.Contains(w.Body.String(), "actor must be a user id")) {
			t.Errorf("?%s: ok %v, id %d, answered %d %s", tt.query, ok, id, w.Code, w.Body.String())
		}
	}
}
