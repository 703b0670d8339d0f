package api

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/ragent-go/ragent/service"
)

// storableStrings refuses a NUL anywhere in a decoded value and names where.
func TestStorableStringsRefusesNUL(t *testing.T) {
	type inner struct {
		Label string `json:"label"`
	}
	type body struct {
		Name    string            `json:"name"`
		Tags    []string          `json:"tags"`
		Inner   *inner            `json:"inner"`
		Meta    map[string]string `json:"meta"`
		Raw     json.RawMessage   `json:"raw"`
		Any     any               `json:"any"`
		Skipped string            `json:"-"`
	}
	tests := []struct {
		name, in, field string // field "" means accepted
	}{
		{"clean", `{"name":"ok","tags":["a"],"inner":{"label":"x"},"meta":{"k":"v"},"raw":"\u0000","any":["y"]}`, ""},
		{"top-level", `{"name":"a\u0000"}`, "`name`"},
		{"slice element", `{"tags":["a","b\u0000"]}`, "`tags[1]`"},
		{"nested", `{"inner":{"label":"\u0000"}}`, "`inner.label`"},
		{"map value", `{"meta":{"k":"\u0000"}}`, "`meta.k`"},
		{"map key", `{"meta":{"k\u0000":"v"}}`, "a key of `meta`"},
		{"interface", `{"any":{"deep":["\u0000"]}}`, "`any.deep[0]`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b body
			if err := decodeJSON(strings.NewReader(tt.in), &b, true); err != nil {
				t.Fatalf("decode: %v", err)
			}
			err := storableStrings(&b)
			if tt.field == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !errors.Is(err, service.ErrInvalid) || !strings.Contains(err.Error(), tt.field) || !strings.Contains(err.Error(), "NUL") {
				t.Fatalf("got %v, want ErrInvalid naming %s", err, tt.field)
			}
		})
	}
}
