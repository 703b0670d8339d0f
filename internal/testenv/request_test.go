package testenv

import (
	"io"
	"testing"
)

func TestNewRequest(t *testing.T) {
	for _, tt := range []struct {
		name        string
		body        any
		want, ctype string
	}{
		{"none", nil, "", ""},
		{"string as it is", `{"a":`, `{"a":`, "application/json"},
		{"bytes as they are", []byte("{}x"), "{}x", "application/json"},
		{"a value as JSON", map[string]int{"a": 1}, `{"a":1}`, "application/json"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := NewRequest(t, "POST", "http://127.0.0.1/x", tt.body)
			var got []byte
			if req.Body != nil {
				got, _ = io.ReadAll(req.Body)
			}
			if string(got) != tt.want || req.Header.Get("Content-Type") != tt.ctype {
				t.Fatalf("body %q, Content-Type %q; want %q, %q", got, req.Header.Get("Content-Type"), tt.want, tt.ctype)
			}
		})
	}
}
