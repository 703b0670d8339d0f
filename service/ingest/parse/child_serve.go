package parse

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sync"
	"time"
)

// ServeChild is the child side of ChildParser (the `ragent parse`
// command): it reads requests (a JSON header line, then the file) from r
// until r ends, parses each, and answers each with one line of JSON on w:
// the blocks or the parse failure. It returns an error only when a request
// itself is unreadable, which ends the process.
func ServeChild(ctx context.Context, r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, 64<<10)
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, io.EOF) && len(line) == 0 {
			return nil // the parent is done with this process
		}
		if err != nil {
			return fmt.Errorf("parse: read the request: %w", err)
		}
		var req childRequest
		if err := json.Unmarshal(line, &req); err != nil {
			return fmt.Errorf("parse: bad request: %w", err)
		}
		if req.Size < 0 || req.Size > 1<<32 {
			return fmt.Errorf("parse: bad file size %d", req.Size)
		}
		if req.MemoryLimit > 0 {
			// A soft target: the collector works harder well before the
			// parent's hard cap kills the process.
			debug.SetMemoryLimit(req.MemoryLimit / 4 * 3)
		}
		blob := make([]byte, req.Size)
		if _, err := io.ReadFull(br, blob); err != nil {
			return fmt.Errorf("parse: read the file: %w", err)
		}
		// The parent's deadline is the one that counts: it kills this
		// process. One here would answer while the abandoned parse kept
		// running in a process about to be reused.
		limits := req.Limits
		limits.Timeout = limits.withDefaults().Timeout + time.Hour
		if limits.OCR.MemoryLimit <= 0 {
			limits.OCR.MemoryLimit = req.MemoryLimit // an OCR program may use as much as this process
		}
		var mu sync.Mutex // pages are read in parallel
		pctx := withProgress(ctx, func() {
			mu.Lock()
			defer mu.Unlock()
			_, _ = bw.Write(progressLine)
			_ = bw.Flush()
		})
		var resp childResponse
		doc, err := Parse(pctx, bytes.NewReader(blob), req.Size, req.Mime, limits)
		if err != nil {
			resp.Error = &childError{Kind: errorKind(err), Message: err.Error()}
		} else {
			resp.Blocks = doc.Blocks
		}
		if err := enc.Encode(resp); err != nil {
			return err
		}
		if err := bw.Flush(); err != nil {
			return err
		}
		// Give a big parse's memory back before the next one, so that the
		// parent's cap measures each parse, not what the last one left.
		// (Forcing it after every small file would double their cost.)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		if ms.HeapInuse > 64<<20 || ms.HeapSys-ms.HeapReleased > 128<<20 {
			debug.FreeOSMemory()
		}
	}
}

func errorKind(err error) string {
	for k, sentinel := range childKinds {
		if errors.Is(err, sentinel) {
			return k
		}
	}
	return ""
}
