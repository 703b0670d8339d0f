package ingest

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/ragent-go/ragent/service"
)

func TestNetPolicyCheck(t *testing.T) {
	var p NetPolicy
	for _, a := range []string{
		"127.0.0.1", "127.255.255.254", "::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "::127.0.0.1",
		"10.0.0.1", "172.16.5.4", "172.31.255.255", "192.168.0.1", "100.64.0.1", "100.127.255.255",
		"169.254.169.254", "fe80::1", "fe80::1%eth0", "fc00::1", "fd00:ec2::254", "0.0.0.0", "0.1.2.3", "::",
		"224.0.0.1", "239.255.255.250", "ff02::1", "255.255.255.255", "240.0.0.1", "192.0.0.170", "198.18.0.1",
		"64:ff9b::7f00:1", "2002:7f00:1::", "2001:0:4136:e378::1",
	} {
		if err := p.Check(netip.MustParseAddr(a)); !errors.Is(err, errBlockedAddress) {
			t.Errorf("%s allowed (%v)", a, err)
		}
	}
	for _, a := range []string{"93.184.215.14", "8.8.8.8", "172.32.0.1", "100.128.0.1", "2606:4700::1111", "::ffff:8.8.8.8"} {
		if err := p.Check(netip.MustParseAddr(a)); err != nil {
			t.Errorf("%s refused: %v", a, err)
		}
	}
	allow := NetPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("10.20.0.0/16"), netip.MustParsePrefix("127.0.0.1/32")}}
	for _, a := range []string{"10.20.1.2", "127.0.0.1", "::ffff:127.0.0.1"} {
		if err := allow.Check(netip.MustParseAddr(a)); err != nil {
			t.Errorf("allowed %s refused: %v", a, err)
		}
	}
	if err := allow.Check(netip.MustParseAddr("10.21.0.1")); err == nil {
		t.Error("10.21.0.1 outside the allow-list allowed")
	}
}

func TestNetPolicyCheckURL(t *testing.T) {
	var p NetPolicy
	for _, u := range []string{
		"http://127.0.0.1/", "http://[::1]:8080/", "http://[::ffff:127.0.0.1]/", "http://169.254.169.254/latest",
		"http://2130706433/", "http://0x7f000001/", "http://0x7f.0.0.1/", "http://0177.0.0.1/", "http://127.1/",
		"http://017700000001/", "http://1.2.3.4.5/", "http://[fe80::1%25eth0]/",
		"ftp://example.com/", "file:///etc/passwd", "javascript:alert(1)", "http:///nohost", "//example.com/x",
		"http://user:pass@example.com/", "", "not a url",
	} {
		_, err := p.CheckURL(u)
		if !errors.Is(err, service.ErrInvalid) {
			t.Errorf("%q accepted (%v)", u, err)
		}
	}
	for _, u := range []string{"https://example.com/doc.pdf", "http://wiki.internal.example:8080/page?id=1", "https://8.8.8.8/x", "https://cafe/", "https://a1.b2/"} {
		if _, err := p.CheckURL(u); err != nil {
			t.Errorf("%q refused: %v", u, err)
		}
	}
}

// The dial-time check sees the resolved address: a name that resolves to
// loopback is refused although the URL passed CheckURL.
func TestNetPolicyClientChecksResolvedAddress(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	var p NetPolicy
	u := "http://localhost:" + port + "/"
	if _, err := p.CheckURL(u); err != nil {
		t.Fatal(err)
	}
	_, err := p.Client(5 * time.Second).Get(u)
	if !errors.Is(err, errBlockedAddress) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("fetch of localhost: %v", err)
	}
	allowed := NetPolicy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}
	resp, err := allowed.Client(5 * time.Second).Get(u)
	if err != nil {
		t.Fatalf("allowed fetch: %v", err)
	}
	resp.Body.Close()
}

const wantSig = "35495024f4ef3f94e5a93e22221544c4b75e9a42300cd965ab81cb85cd994e91"

func TestWebhookSignatureAndSealer(t *testing.T) {
	// HMAC-SHA256("whsec_test", "1700000000.{}"), computed independently
	// with: printf '1700000000.{}' | openssl dgst -sha256 -hmac whsec_test
	if got := sign("whsec_test", 1700000000, []byte("{}")); got != "v1="+wantSig {
		t.Fatalf("signature %s", got)
	}
	s := newSealer([]byte("signing secret"))
	sealed, err := s.seal("whsec_abc", 42)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sealed), "whsec_abc") {
		t.Fatal("the sealed secret contains the secret")
	}
	if got, err := s.open(sealed, 42); err != nil || got != "whsec_abc" {
		t.Fatalf("open: %q %v", got, err)
	}
	if _, err := s.open(sealed, 43); err == nil {
		t.Fatal("a sealed secret opened under another webhook id")
	}
	if _, err := newSealer([]byte("another secret")).open(sealed, 42); err == nil {
		t.Fatal("a sealed secret opened under another key")
	}
}
