package api

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/idempotent"
	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/chat"
)

// chatStream answers POST /chat with the event stream of DESIGN §6. A
// request that fails validation gets a JSON error instead. The turn is
// resumable: a client that loses the stream reads it again from
// GET /chat/tasks/{taskId}/events, and the answer runs on meanwhile.
func (s *Server) chatStream(c *gin.Context) {
	var req chat.Request
	if !s.bindJSON(c, &req) {
		return
	}
	req.Resumable = true
	// The Idempotency-Key of a chat is its submit key, kept in the
	// database with the question: a retry with it follows the first
	// answer instead of asking again, even when the Redis submit lock was
	// lost in a failover.
	if key := c.GetHeader(IdempotencyKeyHeader); key != "" {
		if len(key) > idempotent.MaxKeyLen {
			fail(c, service.Errorf(service.ErrInvalid, "%s must be 1 to %d bytes", IdempotencyKeyHeader, idempotent.MaxKeyLen))
			return
		}
		req.SubmitKey = key
	}
	sse := newSSEWriter(c.Writer)
	defer sse.keepAlive(s.deps.PingInterval)()
	if err := s.deps.Chat.Chat(c.Request.Context(), principal(c), req, sse.chatEvent); err != nil {
		fail(c, err)
	}
}

// chatEvent writes one event of the chat stream.
func (s *sseWriter) chatEvent(e chat.Event) error {
	if e.Name == chat.EventDone {
		return s.event(e.ID, e.Name, nil, "[DONE]")
	}
	return s.event(e.ID, e.Name, e.Data, "")
}

// chatEvents answers GET /chat/tasks/{taskId}/events: the events of a
// resumable task after Last-Event-ID (the header, as browsers send it when
// they reconnect, or the lastEventId query parameter; none replays from
// the start), then the live ones until done. A failure before the first
// event gets a JSON error; one after it an error event without an id, so a
// client never mistakes a cut stream for an answer's end.
func (s *Server) chatEvents(c *gin.Context) {
	id, ok := pathID(c, "taskId")
	if !ok {
		return
	}
	after, err := lastEventID(c)
	if err != nil {
		fail(c, err)
		return
	}
	ctx := c.Request.Context()
	sse := newSSEWriter(c.Writer)
	defer sse.keepAlive(s.deps.PingInterval)()
	err = s.deps.Chat.Events(ctx, principal(c), id, after, sse.chatEvent)
	started, gone := sse.state()
	switch {
	case err == nil, ctx.Err() != nil, gone:
	case !started:
		fail(c, err)
	default:
		logger(c).WarnContext(ctx, "resumed stream cut", "task", id, "err", err)
		_ = sse.event(0, chat.EventError, chat.Error{Code: service.CodeOf(err), Message: "the stream of this answer ended early; read the saved answer from the conversation"}, "")
	}
}

// lastEventID reads the id a client resumes after.
func lastEventID(c *gin.Context) (int, error) {
	v := strings.TrimSpace(c.GetHeader("Last-Event-ID"))
	if v == "" {
		v = strings.TrimSpace(c.Query("lastEventId"))
	}
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, service.Errorf(service.ErrInvalid, "Last-Event-ID %q is not an event id of this stream", v)
	}
	return n, nil
}

func (s *Server) stopChat(c *gin.Context) {
	id, ok := pathID(c, "taskId")
	if !ok {
		return
	}
	if err := s.deps.Chat.Stop(c.Request.Context(), principal(c), id); err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, gin.H{"taskId": id, "stopped": true})
}
