package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/internal/testenv"
)

// TestHealthcheckCommand: `ragent healthcheck` exits 0 only when /readyz on
// RAGENT_HTTP_ADDR's port answers 200; a 503 and a closed port fail it.
func TestHealthcheckCommand(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	check := func(addr string) error {
		getenv := func(k string) string {
			if k == "RAGENT_HTTP_ADDR" {
				return addr
			}
			return ""
		}
		return run(context.Background(), []string{"healthcheck", "--timeout", "5s"}, getenv, io.Discard, io.Discard)
	}

	for _, addr := range []string{":" + port, "0.0.0.0:" + port, "127.0.0.1:" + port} {
		if err := check(addr); err != nil {
			t.Errorf("RAGENT_HTTP_ADDR=%s, /readyz 200: %v, want success", addr, err)
		}
	}
	status = http.StatusServiceUnavailable
	if err := check(":" + port); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("/readyz 503: err = %v, want a failure naming 503", err)
	}

	// A port nobody listens on.
	closed := testenv.FreePort(t)
	if err := check(":" + strconv.Itoa(closed)); err == nil {
		t.Errorf("nothing on port %d: healthcheck succeeded", closed)
	}
}
