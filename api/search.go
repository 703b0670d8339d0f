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
	res, err := s.deps.Search.Run(c.Request.Context(), principal(c), q)
	if err != nil {
		fail(c, err)
		return
	}
	if res.Results == nil {
		res.Results = []service.SearchResult{}
	}
	out := gin.H{"results": res.Results}
	if len(res.KeywordOnly) > 0 {
		// Knowledge bases whose vectors are in a space this instance cannot
		// embed (README "Embedding model changes").
		out["keywordOnly"] = res.KeywordOnly
	}
	c.JSON(http.StatusOK, out)
}
