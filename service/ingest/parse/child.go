package parse

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
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ragent-go/ragent/text"
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
	Parse(ctx context.Context, blob []byte, mime string, limits Limits) (*Text, error)
}

// InProcess parses in the calling process with Parse.
type InProcess struct{}

// Parse implements Parser.
func (InProcess) Parse(ctx context.Context, blob []byte, mime string, limits Limits) (*Text, error) {
	return Parse(ctx, bytes.NewReader(blob), int64(len(blob)), mime, limits)
}

// ChildParser parses files in child processes running ServeChild (the
// `ragent parse` command). A child that takes longer than Limits.Timeout or
// whose resident memory passes MemoryLimit is killed, so a hostile file
// costs at most that much time and memory, whatever the parser library does
// with it. Children start with an empty environment: they see none of the
// worker's secrets.
//
// Starting a Go binary costs tens of milliseconds, more than parsing a
// typical file, so a child that finished its parse normally is kept for the
// next one (up to MaxIdle of them, each for MaxUses parses); one that was
// killed, crashed or misbehaved is never reused. Close ends the idle ones.
type ChildParser struct {
	Command     []string      // program and arguments that run ServeChild on stdin/stdout
	MemoryLimit int64         // resident memory of a child; default 1 GiB
	Poll        time.Duration // how often a child's memory is sampled; default 50ms
	MaxIdle     int           // children kept between parses; default 4
	MaxUses     int           // parses per child before it is replaced; default 100
	Log         *slog.Logger  // may be nil

	mu     sync.Mutex
	idle   []*parserProc
	closed bool
}

// childRequest is the header line of one request; the file follows it.
type childRequest struct {
	Mime        string `json:"mime"`
	Size        int64  `json:"size"`
	Limits      Limits `json:"limits"`
	MemoryLimit int64  `json:"memoryLimit"`
}

// childResponse is the one line a child writes back per request: blocks,
// or a parse failure.
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

// childUsage is what the parent observed of one parse.
type childUsage struct {
	Pid     int
	MaxRSS  int64 // peak resident memory of the child during the parse, bytes (0 where unknown)
	Elapsed time.Duration
}

// parserProc is one child process and the parent's ends of its pipes.
type parserProc struct {
	cmd    *exec.Cmd
	stdin  *os.File
	stdout *bufio.Reader
	out    *os.File
	stderr *headBuffer
	exited chan struct{} // closed once the process has been waited for
	uses   int
}

func (p *ChildParser) defaults() (memLimit int64, poll time.Duration, maxIdle, maxUses int) {
	memLimit, poll, maxIdle, maxUses = p.MemoryLimit, p.Poll, p.MaxIdle, p.MaxUses
	if memLimit <= 0 {
		memLimit = 1 << 30
	}
	if poll <= 0 {
		poll = 50 * time.Millisecond
	}
	if maxIdle <= 0 {
		maxIdle = 4
	}
	if maxUses <= 0 {
		maxUses = 100
	}
	return memLimit, poll, maxIdle, maxUses
}

// Parse implements Parser.
func (p *ChildParser) Parse(ctx context.Context, blob []byte, mime string, limits Limits) (*Text, error) {
	doc, _, err := p.run(ctx, blob, mime, limits)
	return doc, err
}

// Close ends the idle children. Parses still running end with their
// callers' contexts; their children are not kept afterwards.
func (p *ChildParser) Close() error {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, c := range idle {
		c.stop()
	}
	return nil
}

// get returns an idle child or starts one.
func (p *ChildParser) get() (*parserProc, error) {
	p.mu.Lock()
	if n := len(p.idle); n > 0 {
		c := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		select {
		case <-c.exited: // died while idle: start another
		default:
			return c, nil
		}
	} else {
		p.mu.Unlock()
	}
	if len(p.Command) == 0 {
		return nil, errors.New("ingest: ChildParser without a command")
	}
	cmd := exec.Command(p.Command[0], p.Command[1:]...)
	cmd.Env = childEnv()
	isolate(cmd)
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	c := &parserProc{cmd: cmd, stdin: inW, out: outR, stdout: bufio.NewReaderSize(outR, 64<<10),
		stderr: &headBuffer{max: 4 << 10}, exited: make(chan struct{})}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, c.stderr
	err = cmd.Start()
	inR.Close() // the child's ends: the parent keeps only its own
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		// Not the file's fault: a redelivery on a healthy worker may do.
		return nil, fmt.Errorf("start the parser process: %w", err)
	}
	go func() {
		_ = cmd.Wait()
		close(c.exited)
	}()
	return c, nil
}

// put keeps a healthy child for the next parse, or ends it.
func (p *ChildParser) put(c *parserProc) {
	_, _, maxIdle, maxUses := p.defaults()
	p.mu.Lock()
	if !p.closed && c.uses < maxUses && len(p.idle) < maxIdle {
		p.idle = append(p.idle, c)
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	c.stop()
}

// stop ends an idle child: end of input tells it to exit; a child that
// does not is killed.
func (c *parserProc) stop() {
	c.stdin.Close()
	select {
	case <-c.exited:
	case <-time.After(2 * time.Second):
		c.kill()
	}
	c.out.Close()
}

// kill ends a child at once and waits until it is gone.
func (c *parserProc) kill() {
	_ = c.cmd.Process.Kill()
	<-c.exited
	c.stdin.Close()
	c.out.Close()
}

func (p *ChildParser) run(ctx context.Context, blob []byte, mime string, limits Limits) (*Text, childUsage, error) {
	limits = limits.withDefaults()
	memLimit, poll, _, _ := p.defaults()
	head, err := json.Marshal(childRequest{Mime: mime, Size: int64(len(blob)), Limits: limits, MemoryLimit: memLimit})
	if err != nil {
		return nil, childUsage{}, err
	}
	c, err := p.get()
	if err != nil {
		return nil, childUsage{}, err
	}
	pid := c.cmd.Process.Pid
	resetPeakRSS(pid)
	start := time.Now()

	// The session writes the request and reads the one-line answer. JSON
	// at most doubles text (escaped newlines and tabs); the rest is
	// per-block overhead, so a longer answer means a misbehaving child.
	maxOut := 2*limits.MaxTextBytes + 1<<20
	type answer struct {
		line []byte
		err  error
	}
	answered := make(chan answer, 1)
	progressed := make(chan struct{}, 1)
	go func() {
		if _, err := c.stdin.Write(append(head, '\n')); err != nil {
			answered <- answer{err: err}
			return
		}
		if _, err := c.stdin.Write(blob); err != nil {
			answered <- answer{err: err}
			return
		}
		for {
			line, err := readLine(c.stdout, maxOut)
			if err == nil && bytes.HasPrefix(line, progressLine[:len(progressLine)-1]) {
				select {
				case progressed <- struct{}{}:
				default:
				}
				continue
			}
			answered <- answer{line, err}
			return
		}
	}()

	// Each page the child reads by OCR moves the deadline to at least
	// OCR.PageTimeout from then, as guard does in process.
	deadline := start.Add(limits.Timeout)
	timer := time.NewTimer(limits.Timeout)
	defer timer.Stop()
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	var (
		ans    answer
		reason error // why the child was killed
		peak   int64
	)
wait:
	for {
		select {
		case ans = <-answered:
			break wait
		case <-ctx.Done():
			reason = ctx.Err() // the caller gave up (shutdown): not the file's fault
		case <-progressed:
			if d := time.Now().Add(limits.OCR.PageTimeout); d.After(deadline) {
				deadline = d
				timer.Reset(time.Until(d))
			}
		case <-timer.C:
			reason = fmt.Errorf("%w: parsing took longer than %s", ErrTooLarge, deadline.Sub(start).Round(time.Second))
		case <-ticker.C:
			if rss, ok := processRSS(pid); ok {
				peak = max(peak, rss)
				if rss > memLimit {
					reason = memoryError(memLimit)
				}
			}
		case <-c.exited:
			// Crashed: its answer, if any, is already in the pipe.
			ans = <-answered
			break wait
		}
		if reason != nil {
			c.kill()
			<-answered // the session ends once the pipes are closed
			break wait
		}
	}
	usage := childUsage{Pid: pid, MaxRSS: max(peak, PeakRSS(pid)), Elapsed: time.Since(start)}
	if p.Log != nil {
		p.Log.DebugContext(ctx, "parser process answered", "pid", pid, "mime", mime, "bytes", len(blob),
			"ms", usage.Elapsed.Milliseconds(), "max_rss", usage.MaxRSS, "killed", reason)
	}
	if reason != nil {
		return nil, usage, reason
	}
	if ans.err != nil && ctx.Err() != nil {
		c.kill()
		return nil, usage, ctx.Err() // shutting down: whatever ended the child, it was not the file
	}
	if ans.err != nil {
		// The child died on its own: a Go runtime fatal error (a stack
		// overflow in a recursive parser) or a signal; or it wrote more
		// than any answer can hold. The same bytes will do it again.
		c.kill()
		if errors.Is(ans.err, errAnswerTooLong) {
			return nil, usage, fmt.Errorf("%w: the parser's output exceeds %s", ErrTooLarge, formatBytes(maxOut))
		}
		return nil, usage, fmt.Errorf("%w: the parser crashed on this file (%s)", ErrCorrupt, crashSummary(c.stderr.String()))
	}
	if usage.MaxRSS > memLimit {
		c.kill() // a spike between two samples
		return nil, usage, memoryError(memLimit)
	}
	var resp childResponse
	if err := json.Unmarshal(ans.line, &resp); err != nil {
		c.kill()
		return nil, usage, fmt.Errorf("%w: the parser process answered garbage: %v", ErrCorrupt, err)
	}
	c.uses++
	p.put(c)
	if resp.Error != nil {
		return nil, usage, resp.Error
	}
	doc := &Text{Blocks: resp.Blocks, max: limits.MaxTextBytes}
	for _, b := range doc.Blocks {
		doc.size += int64(len(b.Text))
	}
	if doc.size > limits.MaxTextBytes {
		doc.full = true
		return nil, usage, doc.textErr()
	}
	return doc, usage, nil
}

func memoryError(limit int64) error {
	return fmt.Errorf("%w: parsing needed more than %s of memory", ErrTooLarge, formatBytes(limit))
}

var errAnswerTooLong = errors.New("answer too long")

// progressLine is what a child writes after each page it read by OCR,
// before its answer.
var progressLine = []byte("{\"progress\":1}\n")

// readLine reads one newline-terminated line of at most max bytes.
func readLine(r *bufio.Reader, max int64) ([]byte, error) {
	var line []byte
	for {
		frag, err := r.ReadSlice('\n')
		line = append(line, frag...)
		if int64(len(line)) > max {
			return nil, errAnswerTooLong
		}
		if err == nil {
			return line, nil
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return nil, err
		}
	}
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
// false where /proc is missing (not Linux): there only the parse timeout
// bounds a child.
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

// resetPeakRSS restarts a process's peak resident set size (VmHWM) from its
// current size, so peakRSS measures one parse of a reused child. Where the
// kernel does not allow it, peakRSS stays the child's lifetime peak, which
// only errs on the side of the cap.
func resetPeakRSS(pid int) {
	_ = os.WriteFile("/proc/"+strconv.Itoa(pid)+"/clear_refs", []byte("5"), 0)
}

// PeakRSS reads a process's peak resident set size (VmHWM), or 0 where
// /proc does not tell (tests read their parser processes' peaks with it).
func PeakRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

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
				return text.Truncate(l, 200)
			}
		}
	}
	if first == "" {
		return "no output"
	}
	return text.Truncate(first, 200)
}
