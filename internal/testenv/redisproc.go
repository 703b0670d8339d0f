package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisProc is a redis-server (or redis-sentinel) of the test's own, on a
// free loopback port, for tests that kill, promote or empty their Redis:
// the shared test topologies are never theirs to disturb.
type RedisProc struct {
	Addr string
	bin  string
	args []string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has ended
}

// FreePort returns a loopback port nothing listens on at the moment.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// FreeAddr is FreePort as host:port.
func FreeAddr(t testing.TB) string {
	t.Helper()
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(FreePort(t)))
}

// StartRedisServer starts redis-server on a free port with args after the
// test's own defaults (no persistence, a temporary directory), waits until
// it answers and kills it when the test ends. Without redis-server the test
// fails under RAGENT_REQUIRE_SERVICES=1 and skips otherwise.
//
// A port free when picked may be taken before redis-server binds it (an
// outgoing connection of a parallel test gets it as its local port): the
// process then exits at once, and another free port is tried.
func StartRedisServer(t testing.TB, args ...string) *RedisProc {
	t.Helper()
	return onFreePorts(t, func() (*RedisProc, error) {
		p := newRedisProc(t, "redis-server", FreePort(t), args...)
		return p, p.start()
	})
}

// onFreePorts returns what start started, calling it again (on ports it
// picks anew, up to three times in all) while its error is errExited: a
// process that ended before it answered, as one whose port was taken.
// Any other error fails the test.
func onFreePorts[T any](t testing.TB, start func() (T, error)) T {
	t.Helper()
	for attempt := 1; ; attempt++ {
		v, err := start()
		switch {
		case err == nil:
			return v
		case attempt < 3 && errors.Is(err, errExited):
			t.Logf("%v; trying other ports", err)
		default:
			t.Fatal(err)
		}
	}
}

// StartRedisServerOn is StartRedisServer on a given port (a Sentinel
// topology needs its ports before its processes).
func StartRedisServerOn(t testing.TB, port int, args ...string) *RedisProc {
	t.Helper()
	p := newRedisProc(t, "redis-server", port, args...)
	p.Start(t)
	return p
}

func newRedisProc(t testing.TB, name string, port int, args ...string) *RedisProc {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		unavailable(t, name, err)
	}
	p := &RedisProc{Addr: "127.0.0.1:" + strconv.Itoa(port), bin: bin,
		args: append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
			"--dir", t.TempDir()}, args...)}
	t.Cleanup(p.Kill)
	return p
}

// errExited marks a process that ended before it answered.
var errExited = errors.New("exited before it answered")

// Start (re)starts the process with its arguments and waits until it
// answers PING.
func (p *RedisProc) Start(t testing.TB) {
	t.Helper()
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
}

// start runs the process and waits up to 10 s until it answers PING. If it
// ends first, or does not answer, the error says so with the end of what
// it wrote (redis-server logs why it could not bind or start).
func (p *RedisProc) start() error {
	out := &tailBuffer{}
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.mu.Unlock()
	c := p.Client()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	ping := func() error {
		// A short wait per try: whatever holds a taken port may never answer.
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		return c.Ping(ctx).Err()
	}
	for ping() != nil {
		select {
		case <-exited:
			return fmt.Errorf("%s %w (%v); its last output:\n%s", p.Addr, errExited, cmd.ProcessState, out)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not answer within 10s; its last output:\n%s", p.Addr, out)
		}
	}
	return nil
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

func (b *tailBuffer) Write(data []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, data...)
	if over := len(b.buf) - 4096; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(data), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// Client returns a new client of this process alone (the caller closes it).
func (p *RedisProc) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, DialTimeout: time.Second})
}

// Kill sends SIGKILL and waits for the process to end: what it had not
// replicated is lost.
func (p *RedisProc) Kill() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.cmd = nil
	p.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		<-exited
	}
}
