package idempotent

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"unicode/utf8"
)

// Canonical returns a canonical form of a JSON body: object keys sorted,
// insignificant whitespace removed, numbers kept exactly as written (so large
// integer IDs are not rounded through float64). Two requests that differ
// only in key order or formatting therefore hash alike. A body that is not
// exactly one valid JSON value (empty, form data, trailing garbage, invalid
// UTF-8, which decoding would silently replace) is returned unchanged.
func Canonical(body []byte) []byte {
	if len(bytes.TrimSpace(body)) == 0 || !utf8.Valid(body) {
		return body
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return body
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return body
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	// The canonical form is hashed, never served, so HTML escaping would
	// only make it differ from what the client sent.
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return body
	}
	// Encode terminates the value with a newline that is not part of it.
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}
