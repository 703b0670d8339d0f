package api

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/ratelimit"
	"github.com/ragent-go/ragent/service"
)

// uploadGate bounds concurrent uploads across instances. It runs after
// authentication and before the multipart body is read, so a refused upload
// costs nothing: no permit → 429 with Retry-After, Redis down → 503.
func uploadGate(sem *ratelimit.Semaphore, retryAfter time.Duration) gin.HandlerFunc {
	return func(c *gin.Context) {
		permit, err := sem.Acquire(c.Request.Context())
		switch {
		case err == nil:
		case errors.Is(err, ratelimit.ErrTimeout), errors.Is(err, ratelimit.ErrQueueFull):
			c.Header("Retry-After", strconv.Itoa(int(math.Ceil(retryAfter.Seconds()))))
			fail(c, service.Errorf(service.ErrBusy, "too many uploads in progress; retry shortly"))
			return
		case errors.Is(err, ratelimit.ErrUnavailable):
			fail(c, service.Errorf(service.ErrUnavailable, "upload coordination is unavailable; nothing was stored"))
			return
		default:
			fail(c, err)
			return
		}
		defer permit.Release()
		c.Next()
	}
}

// LimiterStats reads the chat limiter's shared state.
type LimiterStats interface {
	Stats(ctx context.Context) (ratelimit.Stats, error)
}

func (s *Server) limiterStats(c *gin.Context) {
	if s.deps.ChatLimiter == nil {
		c.JSON(http.StatusOK, gin.H{"enabled": false, "permitsInUse": 0, "maxConcurrent": 0, "queueLength": 0, "oldestWaitMs": 0})
		return
	}
	st, err := s.deps.ChatLimiter.Stats(c.Request.Context())
	if err != nil {
		fail(c, service.Errorf(service.ErrUnavailable, "limiter state unavailable: %v", err))
		return
	}
	c.JSON(http.StatusOK, gin.H{
		"enabled": true, "permitsInUse": st.PermitsInUse, "maxConcurrent": s.deps.ChatMaxConcurrent,
		"queueLength": st.QueueLength, "oldestWaitMs": st.OldestWait.Milliseconds(),
	})
}
