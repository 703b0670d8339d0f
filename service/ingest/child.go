package ingest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Parser turns a stored file into blocks.
//
// Go cannot stop a goroutine from outside, so a parse running in the
// worker's own process that loops inside a library (the PDF reader on a
// crafted page tree, say) keeps a core busy until the process exits, and
// one that allocates without bound takes the whole worker down. InProcess
// accepts that for trusted files; ChildParser runs each parse in a child
// process that a timeout or memory cap really ends.
type Parser interface {
	Parse(ctx context.Context, blob []byte, mime string, limits Limits) (*Document, error)
}

// InProcess parses in the calling process with Parse.
type InProcess struct{}

// Parse implements Parser.
func (InProcess) Parse(ctx context.Context, blob []byte, mime string, limits Limits) (*Document, error) {
	return Parse(ctx, bytes.NewReader(blob), int64(len(blob)), mime, limits)
}

// ChildParser parses every file in a new child process running ServeChild
// (the `ragent parse` command). The child is killed when the parse takes
// longer than Limits.Timeout or its resident memory passes MemoryLimit, so a
// hostile file costs at most that much time and memory, whatever the parser
// library does with it. The child starts with an empty environment: it sees
// none of the worker's secrets.
type ChildParser struct {
	Command     []string      // program and arguments that run ServeChild on stdin/stdout
	MemoryLimit int64         // resident memory of the child; default 1 GiB
	Poll        time.Duration // how often the child's memory is sampled; default 50ms
	Log         *slog.Logger  // may be nil
}

// childRequest is the first line a child reads; the file follows it.
type childRequest struct {
	Mime        string `json:"mime"`
	Size        int64  `json:"size"`
	Limits      Limits `json:"limits"`
	MemoryLimit int64  `json:"memoryLimit"`
}

// childResponse is what a child writes back: blocks, or a parse failure.
type childResponse struct {
	Blocks []Block     `json:"blocks,omitempty"`
	Error  *childError `json:"error,omitempty"`
}

// childError carries a parse failure across the process boundary, keeping
// the sentinel it wraps so that IsPermanent and the API's status table see
// the same error as in process.
type childError struct {
	Kind    string `json:"kind"` // a key of childKinds, or "" for a transient failure
	Message string `json:"message"`
}

var childKinds = map[string]error{
	"unsupported": ErrUnsupported, "encrypted": ErrEncrypted, "too_large": ErrTooLarge,
	"corrupt": ErrCorrupt, "empty": ErrEmpty,
}

func (e *childError) Error() string { return e.Message }
func (e *childError) Unwrap() error { return childKinds[e.Kind] }

// childUsage is what the parent observed of one child.
type childUsage struct {
	Pid     int
	MaxRSS  int64 // peak resident memory, bytes
	Elapsed time.Duration
}

// Parse implements Parser.
func (p *ChildParser) Parse(ctx context.Context, blob []byte, mime string, limits Limits) (*Document, error) {
	doc, _, err := p.run(ctx, blob, mime, limits)
	return doc, err
}

func (p *ChildParser) run(ctx context.Context, blob []byte, mime string, limits Limits) (*Document, childUsage, error) {
	limits = limits.withDefaults()
	memLimit := p.MemoryLimit
	if memLimit <= 0 {
		memLimit = 1 << 30
	}
	poll := p.Poll
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	if len(p.Command) == 0 {
		return nil, childUsage{}, errors.New("ingest: ChildParser without a command")
	}
	head, err := json.Marshal(childRequest{Mime: mime, Size: int64(len(blob)), Limits: limits, MemoryLimit: memLimit})
	if err != nil {
		return nil, childUsage{}, err
	}
	pctx, cancel := context.WithTimeout(ctx, limits.Timeout)
	defer cancel()
	cmd := exec.CommandContext(pctx, p.Command[0], p.Command[1:]...)
	cmd.Env = childEnv()
	cmd.Stdin = io.MultiReader(bytes.NewReader(head), strings.NewReader("\n"), bytes.NewReader(blob))
	// JSON at most doubles text (escaped newlines and tabs); the rest is
	// per-block overhead. Past that the child is misbehaving: the write
	// fails, the pipe closes and the child dies of it.
	out := &cappedBuffer{max: 2*limits.MaxTextBytes + 1<<20}
	errOut := &headBuffer{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = out, errOut
	cmd.WaitDelay = time.Second // a killed child's pipes must not hold Wait

	start := time.Now()
	if err := cmd.Start(); err != nil {
		// Not the file's fault: a redelivery on a healthy worker may do.
		return nil, childUsage{}, fmt.Errorf("start the parser process: %w", err)
	}
	var (
		mu          sync.Mutex
		overMemory  bool
		watchDone   = make(chan struct{})
		watchExited = make(chan struct{})
	)
	go func() {
		defer close(watchExited)
		t := time.NewTicker(poll)
		defer t.Stop()
		for {
			select {
			case <-watchDone:
				return
			case <-t.C:
			}
			if rss, ok := processRSS(cmd.Process.Pid); ok && rss > memLimit {
				mu.Lock()
				overMemory = true
				mu.Unlock()
				_ = cmd.Process.Kill()
				return
			}
		}
	}()
	waitErr := cmd.Wait()
	close(watchDone)
	<-watchExited
	usage := childUsage{Pid: cmd.Process.Pid, Elapsed: time.Since(start)}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru != nil {
		usage.MaxRSS = ru.Maxrss * 1024 // kilobytes on Linux
	}
	if p.Log != nil {
		p.Log.DebugContext(ctx, "parser process exited", "mime", mime, "bytes", len(blob),
			"ms", usage.Elapsed.Milliseconds(), "max_rss", usage.MaxRSS, "err", waitErr)
	}
	mu.Lock()
	killedForMemory := overMemory
	mu.Unlock()
	switch {
	case ctx.Err() != nil:
		return nil, usage, ctx.Err() // the caller gave up (shutdown): not the file's fault
	case killedForMemory || usage.MaxRSS > memLimit:
		return nil, usage, fmt.Errorf("%w: parsing needed more than %s of memory", ErrTooLarge, formatBytes(memLimit))
	case errors.Is(pctx.Err(), context.DeadlineExceeded):
		return nil, usage, fmt.Errorf("%w: parsing took longer than %s", ErrTooLarge, limits.Timeout)
	case out.overflow:
		return nil, usage, fmt.Errorf("%w: the parser's output exceeds %s", ErrTooLarge, formatBytes(out.max))
	case waitErr != nil:
		// The child died on its own: a Go runtime fatal error (a stack
		// overflow in a recursive parser) or a signal. The same bytes
		// will crash it again.
		return nil, usage, fmt.Errorf("%w: the parser crashed on this file (%v: %s)", ErrCorrupt, waitErr, crashSummary(errOut.String()))
	}
	var resp childResponse
	if err := json.Unmarshal(out.Bytes(), &resp); err != nil {
		return nil, usage, fmt.Errorf("%w: the parser process answered garbage: %v", ErrCorrupt, err)
	}
	if resp.Error != nil {
		return nil, usage, resp.Error
	}
	doc := &Document{Blocks: resp.Blocks, max: limits.MaxTextBytes}
	for _, b := range doc.Blocks {
		doc.size += int64(len(b.Text))
	}
	if doc.size > limits.MaxTextBytes {
		doc.full = true
		return nil, usage, doc.textErr()
	}
	return doc, usage, nil
}

// childEnv is the child's environment: only what the Go runtime and the
// parsers' temporary files need, never the worker's configuration and
// secrets.
func childEnv() []string {
	var env []string
	for _, k := range []string{"TMPDIR", "PATH", "GOMAXPROCS", "GODEBUG", "GORACE"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// processRSS reads a process's resident set size from /proc. It reports
// false where /proc is missing (not Linux); the peak from rusage, checked
// after the child exits, still applies there.
func processRSS(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, false
	}
	return pages * int64(os.Getpagesize()), true
}

// ServeChild is the child side of ChildParser (the `ragent parse`
// command): it reads one request and the file from r, parses it, and writes
// the blocks or the parse failure to w as JSON. It returns an error only when
// the request itself is unreadable.
func ServeChild(ctx context.Context, r io.Reader, w io.Writer) error {
	br := bufio.NewReaderSize(r, 64<<10)
	line, err := br.ReadSlice('\n')
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
	var resp childResponse
	doc, err := Parse(ctx, bytes.NewReader(blob), req.Size, req.Mime, req.Limits)
	if err != nil {
		resp.Error = &childError{Kind: errorKind(err), Message: err.Error()}
	} else {
		resp.Blocks = doc.Blocks
	}
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(resp)
}

func errorKind(err error) string {
	for k, sentinel := range childKinds {
		if errors.Is(err, sentinel) {
			return k
		}
	}
	return ""
}

// cappedBuffer keeps what is written up to max bytes and fails past it.
type cappedBuffer struct {
	bytes.Buffer
	max      int64
	overflow bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if int64(b.Len()+len(p)) > b.max {
		b.overflow = true
		return 0, errors.New("output over the cap")
	}
	return b.Buffer.Write(p)
}

// headBuffer keeps the first max bytes written to it: the start of a crash
// report says what happened, the stack trace after it is long.
type headBuffer struct {
	buf []byte
	max int
}

func (b *headBuffer) Write(p []byte) (int, error) {
	if room := b.max - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (b *headBuffer) String() string { return string(b.buf) }

// crashSummary picks the line of a child's stderr that says what went
// wrong ("fatal error: stack overflow", "panic: ..."), or its first line.
func crashSummary(s string) string {
	var first string
	for _, l := range strings.Split(s, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if first == "" {
			first = l
		}
		for _, p := range []string{"fatal error:", "panic:", "runtime:"} {
			if strings.HasPrefix(l, p) {
				return truncate(l, 200)
			}
		}
	}
	if first == "" {
		return "no output"
	}
	return truncate(first, 200)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
