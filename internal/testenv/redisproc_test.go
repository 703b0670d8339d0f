package testenv

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
)

// A redis-server that cannot bind its port ends at once: start says so,
// with the server's own reason, instead of waiting 10 s for an answer, so
// StartRedisServer can try another port.
func TestRedisProcStartOnTakenPort(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	p := newRedisProc(t, "redis-server", ln.Addr().(*net.TCPAddr).Port)
	err = p.start()
	if !errors.Is(err, errExited) {
		t.Fatalf("start on a taken port: %v, want errExited", err)
	}
	if !strings.Contains(err.Error(), "in use") {
		t.Errorf("start's error does not carry the server's reason: %v", err)
	}
	// StartRedisServer itself gets a process that answers.
	c := StartRedisServer(t).Client()
	defer c.Close()
	if err := c.Ping(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
}

// A start whose process exited before it answered is tried again; the
// first that starts is returned.
func TestOnFreePortsTriesAgainAfterAnExit(t *testing.T) {
	calls := 0
	got := onFreePorts(t, func() (int, error) {
		calls++
		if calls == 1 {
			return 0, fmt.Errorf("127.0.0.1:1 %w", errExited)
		}
		return calls, nil
	})
	if got != 2 || calls != 2 {
		t.Fatalf("onFreePorts = %d after %d calls, want 2 after 2", got, calls)
	}
}
