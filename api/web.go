package api

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"io"
	"io/fs"
	"net/http"
	"path"
	"regexp"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/web"
)

// serveWeb mounts the embedded UI: the page at / (never cached, so a new
// binary's asset versions are picked up at once) and the assets under
// /assets/ (cached for a year: their URLs carry the content hash).
func serveWeb(r *gin.Engine) {
	index := web.Index()
	csp := pageCSP(index)
	r.GET("/", func(c *gin.Context) {
		c.Header("Cache-Control", "no-cache")
		c.Header("Content-Security-Policy", csp)
		c.Data(http.StatusOK, "text/html; charset=utf-8", index)
	})
	assets := web.Assets()
	serve := func(c *gin.Context) {
		name := strings.TrimPrefix(c.Param("filepath"), "/")
		f, ok := assetFile(assets, name)
		if !ok {
			failCode(c, http.StatusNotFound, "not_found", "no such asset")
			return
		}
		defer f.Close()
		if c.Query("v") == web.Version() {
			c.Header("Cache-Control", "public, max-age=31536000, immutable")
		} else {
			c.Header("Cache-Control", "no-cache")
		}
		st, _ := f.Stat()
		http.ServeContent(c.Writer, c.Request, name, st.ModTime(), f.(io.ReadSeeker))
	}
	r.GET("/assets/*filepath", serve)
	r.HEAD("/assets/*filepath", serve)
}

// assetFile opens a regular file of the UI. Directories (a listing) and
// index.html (the raw template, whose {{VERSION}} placeholders only "/"
// fills in) are not assets.
func assetFile(assets fs.FS, name string) (fs.File, bool) {
	if !fs.ValidPath(name) || name == "." || path.Base(name) == "index.html" {
		return nil, false
	}
	f, err := assets.Open(name)
	if err != nil {
		return nil, false
	}
	st, err := f.Stat()
	if _, seeks := f.(io.ReadSeeker); err != nil || !st.Mode().IsRegular() || !seeks {
		f.Close()
		return nil, false
	}
	return f, true
}

// inlineScript matches the page's inline <script> elements (the import map);
// scripts with a src attribute are files from 'self'.
var inlineScript = regexp.MustCompile(`(?s)<script(?:\s+type="[^"]*")?>(.*?)</script>`)

// pageCSP is the page's Content-Security-Policy: everything from our own
// origin only, no inline code except the import map, which is allowed by
// its hash (it names the versioned asset URLs, so it changes with every
// build and is hashed at start).
func pageCSP(index []byte) string {
	scripts := []string{"'self'"}
	for _, m := range inlineScript.FindAllSubmatch(index, -1) {
		sum := sha256.Sum256(m[1])
		scripts = append(scripts, "'sha256-"+base64.StdEncoding.EncodeToString(sum[:])+"'")
	}
	var b bytes.Buffer
	b.WriteString("default-src 'self'; script-src ")
	b.WriteString(strings.Join(scripts, " "))
	b.WriteString("; style-src 'self'; img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	return b.String()
}
