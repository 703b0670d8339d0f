package testenv

import (
	"context"
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

	mu  sync.Mutex
	cmd *exec.Cmd
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
func StartRedisServer(t testing.TB, args ...string) *RedisProc {
	t.Helper()
	return startRedisProc(t, "redis-server", FreePort(t), args...)
}

// StartRedisServerOn is StartRedisServer on a given port (a Sentinel
// topology needs its ports before its processes).
func StartRedisServerOn(t testing.TB, port int, args ...string) *RedisProc {
	t.Helper()
	return startRedisProc(t, "redis-server", port, args...)
}

func startRedisProc(t testing.TB, name string, port int, args ...string) *RedisProc {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		unavailable(t, name, err)
	}
	p := &RedisProc{Addr: "127.0.0.1:" + strconv.Itoa(port), bin: bin,
		args: append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no",
			"--dir", t.TempDir()}, args...)}
	t.Cleanup(p.Kill)
	p.Start(t)
	return p
}

// Start (re)starts the process with its arguments and waits until it
// answers PING.
func (p *RedisProc) Start(t testing.TB) {
	t.Helper()
	cmd := exec.Command(p.bin, p.args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.cmd = cmd
	p.mu.Unlock()
	c := p.Client()
	defer c.Close()
	Eventually(t, 10*time.Second, p.Addr+" to answer", func() bool {
		return c.Ping(context.Background()).Err() == nil
	})
}

// Client returns a new client of this process alone (the caller closes it).
func (p *RedisProc) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: p.Addr, MaxRetries: -1, DialTimeout: time.Second})
}

// Kill sends SIGKILL and waits for the process to end: what it had not
// replicated is lost.
func (p *RedisProc) Kill() {
	p.mu.Lock()
	cmd := p.cmd
	p.cmd = nil
	p.mu.Unlock()
	if cmd != nil {
		cmd.Process.Kill()
		cmd.Wait()
	}
}
