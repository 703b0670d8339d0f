// Package service is ragent's domain vocabulary: the types, sentinel errors and
// small shared interfaces that every other package speaks.
//
// It imports the standard library only. Feature packages (service/auth,
// service/chat, …) build use cases on it; adapters (repository, cache, mq, …)
// translate their drivers into it; api translates it into HTTP.
package service

import "strconv"

// ID is a Snowflake identifier. It travels as a JSON string because
// JavaScript numbers cannot hold 63 bits.
type ID int64

// String returns the decimal form of id.
func (id ID) String() string { return strconv.FormatInt(int64(id), 10) }

// MarshalJSON encodes id as a JSON string.
func (id ID) MarshalJSON() ([]byte, error) {
	return strconv.AppendQuote(nil, id.String()), nil
}

// UnmarshalJSON accepts a JSON string or number.
func (id *ID) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		*id = 0
		return nil
	}
	if uq, err := strconv.Unquote(s); err == nil {
		s = uq
	}
	v, err := ParseID(s)
	if err != nil {
		return err
	}
	*id = v
	return nil
}

// ParseID parses the decimal form of an ID.
func ParseID(s string) (ID, error) {
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || v <= 0 {
		return 0, Errorf(ErrInvalid, "invalid id %q", s)
	}
	return ID(v), nil
}

// IDGenerator hands out unique IDs.
type IDGenerator interface {
	NextID() (ID, error)
}
