package api

import (
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// restoreChunk serves POST /chunks/{id}/revisions/{revision}/restore: the
// chunk goes back to the state after that revision (0: as parsed), as a
// new revision.
func (s *Server) restoreChunk(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	n, err := strconv.ParseInt(c.Param("revision"), 10, 32)
	if err != nil || n < 0 {
		fail(c, service.Errorf(service.ErrInvalid, "revision must be a revision number (0 for the chunk as parsed)"))
		return
	}
	answer(c, http.StatusOK)(s.deps.Ingest.RestoreChunk(c.Request.Context(), principal(c), id, int(n)))
}
