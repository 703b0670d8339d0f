package testenv

import "testing"

// Default checks one defaulted setting of a config type C: apply (the
// constructor or defaults method under test, returning the config it keeps)
// must turn a zero and a negative value of the field into want, and keep a
// positive one.
func Default[C any, T ~int | ~int64](t *testing.T, name string, apply func(C) C, field func(*C) *T, want T) {
	t.Helper()
	for _, in := range []T{0, -1, 7} {
		var c C
		*field(&c) = in
		c = apply(c)
		exp := want
		if in > 0 {
			exp = in
		}
		if got := *field(&c); got != exp {
			t.Errorf("%s set to %d: kept %d, want %d", name, in, got, exp)
		}
	}
}
