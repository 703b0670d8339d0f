package ingest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"

	"github.com/ragent-go/ragent/service"
)

// errBlockedAddress marks a fetch refused because of where it would go.
var errBlockedAddress = errors.New("address not allowed")

// errTooManyRedirects ends a fetch that keeps being redirected.
var errTooManyRedirects = errors.New("stopped after 5 redirects")

// blockedNets are the destinations a server-side fetch must not reach
// unless allowed by name: they are this host, its private networks or a
// cloud's metadata service, which a URL from a user must not turn ragent
// into a client of (SSRF).
var blockedNets = []struct {
	prefix netip.Prefix
	why    string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("::/96"), "IPv4-compatible (deprecated; reaches IPv4)"},
	{netip.MustParsePrefix("64:ff9b::/96"), "NAT64 (reaches IPv4 behind it)"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "NAT64 (reaches IPv4 behind it)"},
	{netip.MustParsePrefix("2001::/32"), "Teredo (reaches IPv4 behind it)"},
	{netip.MustParsePrefix("2002::/16"), "6to4 (reaches IPv4 behind it)"},
	{netip.MustParsePrefix("fc00::/7"), "private (unique local; includes fd00:ec2::254 metadata)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// NetPolicy decides which addresses server-side fetches (URL imports) may
// reach: public unicast addresses, plus the networks in Allow.
type NetPolicy struct {
	Allow []netip.Prefix
}

// Check refuses an address outside the public internet that Allow does
// not name. IPv4-mapped IPv6 addresses (::ffff:127.0.0.1) are judged as
// the IPv4 address they are.
func (p NetPolicy) Check(ip netip.Addr) error {
	ip = ip.Unmap().WithZone("")
	for _, a := range p.Allow {
		if a.Contains(ip) {
			return nil
		}
	}
	for _, b := range blockedNets {
		if b.prefix.Contains(ip) {
			return fmt.Errorf("%w: %s is %s; an administrator may allow it with RAGENT_FETCH_ALLOW_NETWORKS", errBlockedAddress, ip, b.why)
		}
	}
	if ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) || !ip.IsGlobalUnicast() {
		return fmt.Errorf("%w: %s is not a public unicast address", errBlockedAddress, ip)
	}
	return nil
}

// CheckURL validates a URL a user asks ragent to fetch: http or https, a
// host, no credentials, and no host spelled as a number in a form other
// than a plain dotted quad (2130706433, 0x7f.1, 0177.0.0.1), which
// resolvers read differently. A literal address is checked at once; names
// are checked when their resolved address is dialed (Client), which is the
// check that counts.
func (p NetPolicy) CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() {
		return nil, service.Errorf(service.ErrInvalid, "url must be an absolute http or https URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, service.Errorf(service.ErrInvalid, "url scheme %q is not allowed: use http or https", u.Scheme)
	}
	if u.User != nil {
		return nil, service.Errorf(service.ErrInvalid, "url must not carry credentials")
	}
	host := u.Hostname()
	if host == "" {
		return nil, service.Errorf(service.ErrInvalid, "url has no host")
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if err := p.Check(ip); err != nil {
			return nil, fmt.Errorf("%w: %w", service.ErrInvalid, err)
		}
		return u, nil
	}
	if numericHost(host) {
		return nil, service.Errorf(service.ErrInvalid, "url host %q is a number in an ambiguous form; write the address as a dotted quad", host)
	}
	return u, nil
}

// numericHost reports a host whose last label is numeric (decimal, octal
// or hex): no real domain name ends so, but inet_aton-style parsers read
// such names as IPv4 addresses.
func numericHost(host string) bool {
	labels := strings.Split(strings.TrimSuffix(host, "."), ".")
	last := strings.ToLower(labels[len(labels)-1])
	if last == "" {
		return false
	}
	digits := strings.TrimPrefix(last, "0x")
	for _, r := range digits {
		if !strings.ContainsRune("0123456789abcdef", r) {
			return false
		}
	}
	if last != digits {
		return true // 0x…
	}
	for _, r := range last {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

// Client returns an HTTP client for user-given URLs: every connection's
// resolved address is checked at dial time (so a name that resolves to a
// private address, at once or on a second lookup — DNS rebinding — is
// refused), no proxy from the environment is used (it would hide the
// destination), every redirect is checked again, and each request is
// bounded by timeout.
func (p NetPolicy) Client(timeout time.Duration) *http.Client {
	dialer := &net.Dialer{
		Timeout: timeout,
		Control: func(_, address string, _ syscall.RawConn) error {
			host, _, err := net.SplitHostPort(address)
			if err != nil {
				return err
			}
			ip, err := netip.ParseAddr(host)
			if err != nil {
				return fmt.Errorf("%w: %q is not an address", errBlockedAddress, host)
			}
			return p.Check(ip)
		},
	}
	transport := &http.Transport{
		Proxy:                 nil,
		DialContext:           dialer.DialContext,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
		MaxIdleConns:          10,
		IdleConnTimeout:       30 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	return &http.Client{
		Transport: transport,
		Timeout:   timeout,
		CheckRedirect: func(req *http.Request, via []*http.Request) error {
			if len(via) >= 5 {
				return errTooManyRedirects
			}
			_, err := p.CheckURL(req.URL.String())
			return err
		},
	}
}
