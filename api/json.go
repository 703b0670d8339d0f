package api

import (
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strconv"
	"strings"

	"github.com/ragent-go/ragent/service"
)

// decodeJSON decodes exactly one JSON value, rejecting trailing data and,
// when strict, unknown fields, so typos in field names are reported, not
// ignored. The OpenAI-compatible routes are not strict: their clients send
// every parameter of OpenAI's API, most of which mean nothing here.
func decodeJSON(r io.Reader, dst any, strict bool) error {
	dec := json.NewDecoder(r)
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(dst); err != nil {
		if errors.Is(err, io.EOF) {
			return errors.New("empty body")
		}
		return err
	}
	if dec.More() {
		return errors.New("unexpected data after the JSON value")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// storableStrings applies checkText to every string of a decoded request
// body, so no handler needs its own check; the error names the field.
func storableStrings(v any) error {
	return checkStrings(reflect.ValueOf(v), "")
}

// checkText refuses text that cannot be stored: Postgres rejects U+0000 in
// text columns (and jsonb), which used to surface as a 500 deep in a
// handler. Invalid UTF-8 needs no check here: encoding/json replaces it with
// U+FFFD, and ingest repairs file names the same way (clients still send
// names in legacy encodings).
func checkText(field, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return service.Errorf(service.ErrInvalid, "%s must not contain NUL (U+0000) characters", field)
	}
	return nil
}

// checkStrings walks a decoded request and applies checkText to every
// string in it, so no handler needs its own check. path is the JSON path of
// v ("examples[1]", "knowledgeBase.name") for the error message.
func checkStrings(v reflect.Value, path string) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return checkStrings(v.Elem(), path)
	case reflect.String:
		return checkText(fieldName(path), v.String())
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return nil // []byte and json.RawMessage are not text
		}
		for i := 0; i < v.Len(); i++ {
			if err := checkStrings(v.Index(i), path+"["+strconv.Itoa(i)+"]"); err != nil {
				return err
			}
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			key := iter.Key()
			name := joinPath(path, key.String())
			if key.Kind() == reflect.String {
				if err := checkText("a key of "+fieldName(path), key.String()); err != nil {
					return err
				}
			}
			if err := checkStrings(iter.Value(), name); err != nil {
				return err
			}
		}
	case reflect.Struct:
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" {
				name = f.Name
			}
			p := joinPath(path, name)
			if f.Anonymous && f.Tag.Get("json") == "" {
				p = path // embedded fields are promoted into the parent object
			}
			if err := checkStrings(v.Field(i), p); err != nil {
				return err
			}
		}
	}
	return nil
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func fieldName(path string) string {
	if path == "" {
		return "the body"
	}
	return "`" + path + "`"
}
