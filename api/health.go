package api

import (
	"context"
	"errors"
	"net/http"
	"sort"
	"sync"

	"github.com/gin-gonic/gin"
)

func (s *Server) healthz(c *gin.Context) {
	c.JSON(http.StatusOK, gin.H{"status": "ok"})
}

// readyz checks every dependency concurrently; any failure answers 503 with
// the failing names, so a load balancer stops sending traffic here. The
// endpoint is public, so each check reports only "ok", "timeout" or
// "unavailable"; the error itself (addresses, user names) goes to the log.
func (s *Server) readyz(c *gin.Context) {
	ctx, cancel := context.WithTimeout(c.Request.Context(), s.deps.ReadyTimeout)
	defer cancel()
	var (
		mu     sync.Mutex
		wg     sync.WaitGroup
		checks = make(map[string]string, len(s.deps.Pingers))
	)
	for name, p := range s.deps.Pingers {
		wg.Go(func() {
			status := "ok"
			if err := p.Ping(ctx); err != nil {
				status = "unavailable"
				if errors.Is(err, context.DeadlineExceeded) {
					status = "timeout"
				}
				logger(c).WarnContext(ctx, "readiness check failed", "dependency", name, "err", err)
			}
			mu.Lock()
			checks[name] = status
			mu.Unlock()
		})
	}
	wg.Wait()
	var down []string
	for name, st := range checks {
		if st != "ok" {
			down = append(down, name)
		}
	}
	sort.Strings(down)
	if len(down) > 0 {
		c.JSON(http.StatusServiceUnavailable, gin.H{"status": "unavailable", "down": down, "checks": checks})
		return
	}
	c.JSON(http.StatusOK, gin.H{"status": "ok", "checks": checks})
}
