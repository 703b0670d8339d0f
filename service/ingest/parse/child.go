package parse

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
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

	// JSON at most doubles text (escaped newlines and tabs); the rest is
	// per-block overhead, so a longer answer means a misbehaving child.
	maxOut := 2*limits.MaxTextBytes + 1<<20
	answered, progressed := c.converse(head, blob, maxOut)
	ans, peak, reason := c.watch(ctx, answered, progressed, limits, memLimit, poll, start)
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

// answer is a child's one-line reply to a request, or why none came.
type answer struct {
	line []byte
	err  error
}

// converse writes the request (its header line, then the file) and reads
// the child's reply in the background: a progress line after each page
// read by OCR goes to progressed; the answer, or the failure to read one,
// to answered.
func (c *parserProc) converse(head, blob []byte, maxOut int64) (answered <-chan answer, progressed <-chan struct{}) {
	ans := make(chan answer, 1)
	prog := make(chan struct{}, 1)
	go func() {
		if _, err := c.stdin.Write(append(head, '\n')); err != nil {
			ans <- answer{err: err}
			return
		}
		if _, err := c.stdin.Write(blob); err != nil {
			ans <- answer{err: err}
			return
		}
		for {
			line, err := readLine(c.stdout, maxOut)
			if err == nil && bytes.HasPrefix(line, progressLine[:len(progressLine)-1]) {
				select {
				case prog <- struct{}{}:
				default:
				}
				continue
			}
			ans <- answer{line, err}
			return
		}
	}()
	return ans, prog
}

// watch waits for the child's answer while it holds to the parse's
// deadline, its memory cap and the caller's context; a child that breaks
// one is killed, and reason says why. Each page the child reads by OCR
// moves the deadline to at least OCR.PageTimeout from then, as guard does
// in process. peak is the highest resident memory sampled.
func (c *parserProc) watch(ctx context.Context, answered <-chan answer, progressed <-chan struct{}, limits Limits, memLimit int64, poll time.Duration, start time.Time) (ans answer, peak int64, reason error) {
	pid := c.cmd.Process.Pid
	deadline := start.Add(limits.Timeout)
	timer := time.NewTimer(limits.Timeout)
	defer timer.Stop()
	ticker := time.NewTicker(poll)
	defer ticker.Stop()
	for {
		select {
		case ans = <-answered:
			return ans, peak, nil
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
			return <-answered, peak, nil
		}
		if reason != nil {
			c.kill()
			<-answered // the session ends once the pipes are closed
			return answer{}, peak, reason
		}
	}
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
