package idempotent_test

import (
	"strings"
	"testing"

	"github.com/ragent-go/ragent/idempotent"
)

func TestCanonical(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"sorts keys", `{"b":1,"a":2}`, `{"a":2,"b":1}`},
		{"sorts nested keys", `{"z":{"y":1,"x":[{"d":1,"c":2}]},"a":null}`, `{"a":null,"z":{"x":[{"c":2,"d":1}],"y":1}}`},
		{"drops whitespace", " {\n\t\"a\" : [ 1 , 2 ] ,\r\n \"b\":\"x y\" }\n", `{"a":[1,2],"b":"x y"}`},
		{"keeps array order", `[3,1,2]`, `[3,1,2]`},
		{"keeps big integers exact", `{"id":12345678901234567890123}`, `{"id":12345678901234567890123}`},
		{"keeps number spelling", `{"a":1.50,"b":1e3}`, `{"a":1.50,"b":1e3}`},
		{"unescapes to one spelling", `{"q":"caf\u00e9 \u4e2d"}`, `{"q":"café 中"}`},
		{"does not escape HTML", `{"q":"<a&b>"}`, `{"q":"<a&b>"}`},
		{"scalar", ` "x" `, `"x"`},
		{"not JSON", `question=hello&topK=3`, `question=hello&topK=3`},
		{"trailing garbage", `{"a":1} {"b":2}`, `{"a":1} {"b":2}`},
		{"truncated", `{"a":`, `{"a":`},
		{"empty", ``, ``},
		{"only whitespace", " \n", " \n"},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", "{\"a\":\"\xff\"}"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := string(idempotent.Canonical([]byte(tt.in)))
			if got != tt.want {
				t.Errorf("Canonical(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if again := string(idempotent.Canonical([]byte(got))); again != got {
				t.Errorf("not idempotent: Canonical(%q) = %q", got, again)
			}
		})
	}
}

func TestSubmitKey(t *testing.T) {
	body := []byte(`{"question":"vpn?","knowledgeBaseIds":["1","2"]}`)
	key := idempotent.SubmitKey("ragent:", "/api/v1/chat", "42", body)
	if want := "ragent:idem:submit:/api/v1/chat:42:"; !strings.HasPrefix(key, want) {
		t.Fatalf("key %q does not start with %q", key, want)
	}
	if sum := key[strings.LastIndex(key, ":")+1:]; len(sum) != 32 {
		t.Fatalf("key %q does not end with an md5 hex digest", key)
	}

	reordered := []byte("{\n  \"knowledgeBaseIds\": [\"1\", \"2\"],\n  \"question\": \"vpn?\"\n}")
	if got := idempotent.SubmitKey("ragent:", "/api/v1/chat", "42", reordered); got != key {
		t.Errorf("reordered body: key %q, want %q", got, key)
	}
	for name, other := range map[string]string{
		"other user":    idempotent.SubmitKey("ragent:", "/api/v1/chat", "43", body),
		"other path":    idempotent.SubmitKey("ragent:", "/api/v1/search", "42", body),
		"other body":    idempotent.SubmitKey("ragent:", "/api/v1/chat", "42", []byte(`{"question":"vpn!"}`)),
		"array reorder": idempotent.SubmitKey("ragent:", "/api/v1/chat", "42", []byte(`{"question":"vpn?","knowledgeBaseIds":["2","1"]}`)),
	} {
		if other == key {
			t.Errorf("%s: same key %q", name, key)
		}
	}
}

func TestPayloadHash(t *testing.T) {
	base := idempotent.PayloadHash("POST", "/api/v1/knowledge-bases", []byte(`{"name":"hr","topK":3}`))
	if got := idempotent.PayloadHash("POST", "/api/v1/knowledge-bases", []byte(`{ "topK":3, "name":"hr" }`)); got != base {
		t.Errorf("reordered body: hash %s, want %s", got, base)
	}
	for name, other := range map[string]string{
		"method": idempotent.PayloadHash("PATCH", "/api/v1/knowledge-bases", []byte(`{"name":"hr","topK":3}`)),
		"path":   idempotent.PayloadHash("POST", "/api/v1/admin/intents", []byte(`{"name":"hr","topK":3}`)),
		"body":   idempotent.PayloadHash("POST", "/api/v1/knowledge-bases", []byte(`{"name":"hr","topK":4}`)),
		// The separators keep the method/path boundary from shifting.
		"boundary": idempotent.PayloadHash("POS", "T/api/v1/knowledge-bases", []byte(`{"name":"hr","topK":3}`)),
	} {
		if other == base {
			t.Errorf("other %s: same hash", name)
		}
	}
}
