package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
	"github.com/ragent-go/ragent/service/retrieve"
)

func (s *Server) search(c *gin.Context) {
	var q retrieve.Query
	if !s.bindJSON(c, &q) {
		return
	}
	results, err := s.deps.Search.Search(c.Request.Context(), principal(c), q)
	if err != nil {
		fail(c, err)
		return
	}
	if results == nil {
		results = []service.SearchResult{}
	}
	c.JSON(http.StatusOK, gin.H{"results": results})
}
