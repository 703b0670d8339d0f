package api

import (
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/web"
)

// serveWeb mounts the embedded UI: the page at / (never cached, so a new
// binary's asset versions are picked up at once) and the assets under
// /assets/ (cached for a year: their URLs carry the content hash).
func serveWeb(r *gin.Engine) {
	index := web.Index()
	r.GET("/", func(c *gin.Context) {
		c.Header("Cache-Control", "no-cache")
		c.Header("X-Content-Type-Options", "nosniff")
		c.Header("Referrer-Policy", "same-origin")
		c.Data(http.StatusOK, "text/html; charset=utf-8", index)
	})
	files := http.StripPrefix("/assets/", http.FileServerFS(web.Assets()))
	assets := func(c *gin.Context) {
		if c.Query("v") == web.Version() {
			c.Header("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			c.Header("Cache-Control", "no-cache")
		}
		c.Header("X-Content-Type-Options", "nosniff")
		files.ServeHTTP(c.Writer, c.Request)
	}
	r.GET("/assets/*filepath", assets)
	r.HEAD("/assets/*filepath", assets)
}
