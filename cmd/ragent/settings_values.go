package main

import (
	"cmp"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ragent-go/ragent/api"
)

// value parses into and prints one Config field, like flag.Value.
type value interface {
	Set(string) error
	String() string
}

// scalar is a setting of a basic type: parse reads it (a failure says what
// the value must be: want), format prints it back.
type scalar[T any] struct {
	p      *T
	parse  func(string) (T, error)
	format func(T) string
	want   string
	rules  []func(name string, v T) error // see must
}

func (v scalar[T]) Set(s string) error {
	x, err := v.parse(s)
	if err != nil {
		return errors.New(v.want)
	}
	*v.p = x
	return nil
}

func (v scalar[T]) String() string { return v.format(*v.p) }

// must gives the setting a rule of its own, checked once every setting is
// loaded and the derived defaults are filled in (validate): ok tells the
// values that keep it; a value that breaks it is reported as the setting's
// name followed by what.
func (v scalar[T]) must(ok func(T) bool, what string) scalar[T] {
	return v.rule(func(name string, x T) error {
		if ok(x) {
			return nil
		}
		return fmt.Errorf("%s %s", name, what)
	})
}

// rule is must for a rule that words its own error.
func (v scalar[T]) rule(r func(name string, v T) error) scalar[T] {
	v.rules = append(slices.Clip(v.rules), r)
	return v
}

// check reports every rule the value breaks.
func (v scalar[T]) check(name string) []error {
	var errs []error
	for _, r := range v.rules {
		if err := r(name, *v.p); err != nil {
			errs = append(errs, err)
		}
	}
	return errs
}

// checker is a value with rules of its own (scalar.must).
type checker interface{ check(name string) []error }

// oneOf is a string setting that must be one of allowed.
func oneOf(p *string, allowed ...string) scalar[string] {
	return strValue(p).rule(func(name, v string) error {
		if slices.Contains(allowed, v) {
			return nil
		}
		return fmt.Errorf("%s=%q: must be one of %s", name, v, strings.Join(allowed, ", "))
	})
}

// atLeast, above and between are the usual rules of must.
func atLeast[T cmp.Ordered](min T) func(T) bool { return func(v T) bool { return v >= min } }

func above[T cmp.Ordered](min T) func(T) bool { return func(v T) bool { return v > min } }

func between[T cmp.Ordered](lo, hi T) func(T) bool {
	return func(v T) bool { return lo <= v && v <= hi }
}

// zeroOr lets 0 through besides what ok lets through (0 turns a feature off).
func zeroOr[T cmp.Ordered](ok func(T) bool) func(T) bool {
	return func(v T) bool {
		var zero T
		return v == zero || ok(v)
	}
}

// in is the rule of a string that must be one of allowed, worded by the caller.
func in(allowed ...string) func(string) bool {
	return func(v string) bool { return slices.Contains(allowed, v) }
}

func strValue(p *string) scalar[string] {
	return scalar[string]{p: p, parse: anyString, format: sameString}
}

// anyString and sameString read and print a string as it is.
func anyString(s string) (string, error) { return s, nil }

func sameString(s string) string { return s }

func intValue(p *int) scalar[int] {
	return scalar[int]{p: p, parse: strconv.Atoi, format: strconv.Itoa, want: "not an integer"}
}

func int64Value(p *int64) scalar[int64] {
	parse := func(s string) (int64, error) { return strconv.ParseInt(s, 10, 64) }
	format := func(n int64) string { return strconv.FormatInt(n, 10) }
	return scalar[int64]{p: p, parse: parse, format: format, want: "not an integer"}
}

func floatValue(p *float64) scalar[float64] {
	parse := func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }
	format := func(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }
	return scalar[float64]{p: p, parse: parse, format: format, want: "not a number"}
}

// optionalFloat is a number that may be left unset (nil).
type optionalFloat struct{ p **float64 }

func (v optionalFloat) Set(s string) error {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return errors.New("not a number")
	}
	*v.p = &f
	return nil
}

func (v optionalFloat) String() string {
	if *v.p == nil {
		return ""
	}
	return strconv.FormatFloat(**v.p, 'g', -1, 64)
}

func boolValue(p *bool) scalar[bool] {
	return scalar[bool]{p: p, parse: strconv.ParseBool, format: strconv.FormatBool, want: "not a boolean"}
}

func durationValue(p *time.Duration) scalar[time.Duration] {
	return scalar[time.Duration]{p: p, parse: time.ParseDuration, format: time.Duration.String, want: "not a duration (e.g. 15s)"}
}

// list is a comma-separated setting: parse reads each item (a refusal
// says why), format prints one back.
type list[T any] struct {
	p      *[]T
	parse  func(item string) (T, error)
	format func(T) string
}

func (v list[T]) Set(s string) error {
	var err error
	*v.p, err = parseList(s, v.parse)
	return err
}

func (v list[T]) String() string {
	s := make([]string, len(*v.p))
	for i, x := range *v.p {
		s[i] = v.format(x)
	}
	return strings.Join(s, ",")
}

// prefixesValue is a list of CIDRs; a bare IP stands for itself alone.
func prefixesValue(p *[]netip.Prefix) list[netip.Prefix] {
	return list[netip.Prefix]{p: p, format: netip.Prefix.String, parse: func(item string) (netip.Prefix, error) {
		if p, err := netip.ParsePrefix(item); err == nil {
			return p.Masked(), nil
		}
		if a, err := netip.ParseAddr(item); err == nil {
			return netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()), nil
		}
		return netip.Prefix{}, fmt.Errorf("%q is not a CIDR (e.g. 10.0.0.0/8) or an IP", item)
	}}
}

// originsValue is a list of origins (scheme://host[:port]).
func originsValue(p *[]string) list[string] {
	return list[string]{p: p, format: sameString, parse: func(item string) (string, error) {
		o, ok := api.NormalizeOrigin(item)
		if !ok {
			return "", fmt.Errorf("%q is not an origin (scheme://host[:port], no path)", item)
		}
		return o, nil
	}}
}

// addrsValue is a list of host:port addresses.
func addrsValue(p *[]string) list[string] {
	return list[string]{p: p, format: sameString, parse: func(item string) (string, error) {
		if _, port, err := net.SplitHostPort(item); err != nil || port == "" {
			return "", fmt.Errorf("%q is not host:port", item)
		}
		return item, nil
	}}
}

// listValue is a list of any words (spaces around items dropped).
func listValue(p *[]string) list[string] {
	return list[string]{p: p, parse: anyString, format: sameString}
}

// parseList parses every item of a comma-separated value with parse and
// returns the items it took, with the errors of all it refused.
func parseList[T any](s string, parse func(item string) (T, error)) ([]T, error) {
	var out []T
	var errs []error
	for _, item := range splitList(s) {
		x, err := parse(item)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, x)
	}
	return out, errors.Join(errs...)
}

// splitList splits a comma-separated value, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, item := range strings.Split(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}
