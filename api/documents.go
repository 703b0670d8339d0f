package api

import (
	"errors"
	"fmt"
	"io"
	"math"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"

	"github.com/gin-gonic/gin"

	"github.com/ragent-go/ragent/service"
)

// checkUpload refuses a caller who may not upload into the knowledge base
// before an upload slot is taken or the body read (the ingest use case
// checks again when it stores the file).
func (s *Server) checkUpload(c *gin.Context) {
	kbID, ok := pathID(c, "id")
	if !ok {
		return
	}
	if err := s.deps.Ingest.CheckUpload(c.Request.Context(), principal(c), kbID); err != nil {
		fail(c, err)
	}
}

// uploadDocument streams the multipart `file` part into the ingest use case
// without a temporary file. The request body is capped at the upload limit
// plus room for the multipart envelope.
func (s *Server) uploadDocument(c *gin.Context) {
	kbID, ok := pathID(c, "id")
	if !ok {
		return
	}
	mt, params, err := mime.ParseMediaType(c.GetHeader("Content-Type"))
	if err != nil || mt != "multipart/form-data" || params["boundary"] == "" {
		fail(c, service.Errorf(service.ErrUnsupported, "upload must be multipart/form-data with a `file` part"))
		return
	}
	limit := s.deps.UploadMaxBytes + 64<<10
	if c.Request.ContentLength > limit {
		fail(c, service.UploadTooLarge(s.deps.UploadMaxBytes))
		return
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, limit)
	mr, err := c.Request.MultipartReader()
	if err != nil {
		fail(c, service.Errorf(service.ErrInvalid, "malformed multipart body: %v", err))
		return
	}
	// A pipeline names its document with ?externalId= or an `externalId`
	// field before the file part (the file is streamed, so a field after
	// it comes too late).
	externalID := c.Query("externalId")
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			fail(c, service.Errorf(service.ErrInvalid, "no `file` part in the upload"))
			return
		}
		if err != nil {
			s.uploadError(c, fmt.Errorf("%w: malformed multipart body: %w", service.ErrInvalid, err))
			return
		}
		if part.FormName() == "externalId" && externalID == "" {
			v, err := io.ReadAll(io.LimitReader(part, 4<<10))
			part.Close()
			if err != nil {
				s.uploadError(c, fmt.Errorf("%w: malformed multipart body: %w", service.ErrInvalid, err))
				return
			}
			externalID = string(v)
			continue
		}
		if part.FormName() != "file" {
			part.Close()
			continue
		}
		if err := checkText("the file name", part.FileName()); err != nil {
			part.Close()
			fail(c, err)
			return
		}
		if externalID != "" {
			s.uploadVersion(c, kbID, externalID, part)
			return
		}
		doc, err := s.deps.Ingest.Upload(c.Request.Context(), principal(c), kbID, part.FileName(), part)
		part.Close()
		if err != nil {
			s.uploadError(c, err)
			return
		}
		c.JSON(http.StatusAccepted, doc)
		return
	}
}

// uploadVersion stores the file part as the next version of the document
// with a pipeline's external id: 202 when there is something to ingest,
// 200 when the content is the current version's.
func (s *Server) uploadVersion(c *gin.Context, kbID service.ID, externalID string, part *multipart.Part) {
	doc, changed, err := s.deps.Ingest.UploadVersion(c.Request.Context(), principal(c), kbID, externalID, part.FileName(), part)
	part.Close()
	if err != nil {
		s.uploadError(c, err)
		return
	}
	status := http.StatusAccepted
	if !changed {
		status = http.StatusOK
	}
	c.JSON(status, doc)
}

// uploadError answers a failed upload; a body past the size cap is 413
// whichever reader hit it.
func (s *Server) uploadError(c *gin.Context, err error) {
	if bodyTimedOut(c, err) {
		return
	}
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		fail(c, service.UploadTooLarge(s.deps.UploadMaxBytes))
		return
	}
	fail(c, err)
}

func (s *Server) listDocuments(c *gin.Context) {
	kbID, ok := pathID(c, "id")
	if !ok {
		return
	}
	q, ok := documentQuery(c)
	if !ok {
		return
	}
	docs, err := s.deps.Ingest.FindDocuments(c.Request.Context(), principal(c), kbID, q)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, newList(docs, q.Limit, func(d *service.Document) string { return d.ID.String() }))
}

// documentChunks pages by ordinal: ?cursor= is the last ordinal seen.
func (s *Server) documentChunks(c *gin.Context) {
	id, ok := pathID(c, "id")
	if !ok {
		return
	}
	after, limit := -1, 100
	if v := c.Query("cursor"); v != "" {
		// Ordinals are int4 in Postgres: a larger cursor is no ordinal.
		n, err := strconv.ParseInt(v, 10, 32)
		if err != nil || n < 0 {
			fail(c, service.Errorf(service.ErrInvalid, "invalid cursor: want a chunk ordinal between 0 and %d", math.MaxInt32))
			return
		}
		after = int(n)
	}
	if v := c.Query("limit"); v != "" {
		n, err := parsePositiveInt(v)
		if err != nil || n > 500 {
			fail(c, service.Errorf(service.ErrInvalid, "limit must be between 1 and 500"))
			return
		}
		limit = n
	}
	chunks, err := s.deps.Ingest.Chunks(c.Request.Context(), principal(c), id, after, limit)
	if err != nil {
		fail(c, err)
		return
	}
	c.JSON(http.StatusOK, newList(chunks, limit, func(ch service.Chunk) string { return strconv.Itoa(ch.Ordinal) }))
}
