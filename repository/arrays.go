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
	var b strings.Builder
	b.WriteByte('{')
	for i, s := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('"')
		for _, r := range s {
			if r == '"' || r == '\\' {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String(), nil
}

type intArray []int64

func (a intArray) Value() (driver.Value, error) {
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range a {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(n, 10))
	}
	b.WriteByte('}')
	return b.String(), nil
}

func idArray(ids []service.ID) intArray {
	out := make(intArray, len(ids))
	for i, id := range ids {
		out[i] = int64(id)
	}
	return out
}
