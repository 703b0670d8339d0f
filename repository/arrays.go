package repository

import (
	"database/sql/driver"
	"strconv"
	"strings"

	"github.com/ragent-go/ragent/service"
)

// GORM expands slice arguments into "a, b, c" lists; these types bind a
// slice as one Postgres array literal instead, for ANY(?) and unnest(?).

type textArray []string

func (a textArray) Value() (driver.Value, error) {
	return arrayLiteral(a, func(b *strings.Builder, s string) {
		b.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}), nil
}

type intArray []int64

func (a intArray) Value() (driver.Value, error) {
	return arrayLiteral(a, func(b *strings.Builder, n int64) {
		b.WriteString(strconv.FormatInt(n, 10))
	}), nil
}

// arrayLiteral writes a as a Postgres array literal, "{e1,e2}", each element
// written by elem.
func arrayLiteral[T any](a []T, elem func(*strings.Builder, T)) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, e := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		elem(&b, e)
	}
	b.WriteByte('}')
	return b.String()
}

func idArray(ids []service.ID) intArray {
	out := make(intArray, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}
