package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"strconv"
	"strings"
	"time"

	"github.com/ragent-go/ragent/service"
)

// DeviceTTL is how long a device cookie stays valid; every successful login
// issues a fresh one.
const DeviceTTL = 90 * 24 * time.Hour

// Device cookies (OWASP's "device cookies" against account lockout): after a
// successful login the client gets a cookie naming the user and a random
// nonce, signed with a key derived from the token secret. A login that
// presents a valid one for the user it names is counted in that device's
// own bucket instead of the per-account and per-address ones, so guesses
// from elsewhere cannot lock the owner out of a device they signed in from
// before; clients without one stay under the shared limits.
//
// The value is v1.<user id>.<nonce>.<issued, unix seconds>.<HMAC-SHA256>.
// It grants nothing by itself: the password is checked as always.

func deviceKey(secret []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("ragent device cookie v1"))
	return m.Sum(nil)
}

func (s *Service) deviceMAC(payload string) string {
	m := hmac.New(sha256.New, s.deviceSecret)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// newDevice returns a fresh device cookie for userID.
func (s *Service) newDevice(userID service.ID) (string, error) {
	var nonce [16]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", err
	}
	payload := "v1." + userID.String() + "." + hex.EncodeToString(nonce[:]) + "." + strconv.FormatInt(s.now().Unix(), 10)
	return payload + "." + s.deviceMAC(payload), nil
}

// maxDeviceCookie bounds what is parsed of a client's cookie.
const maxDeviceCookie = 200

// trustedDevice returns the nonce of cookie when it is a valid, unexpired
// device cookie of userID.
func (s *Service) trustedDevice(cookie string, userID service.ID) (nonce string, ok bool) {
	if cookie == "" || len(cookie) > maxDeviceCookie {
		return "", false
	}
	i := strings.LastIndexByte(cookie, '.')
	if i < 0 {
		return "", false
	}
	payload, mac := cookie[:i], cookie[i+1:]
	if !hmac.Equal([]byte(mac), []byte(s.deviceMAC(payload))) {
		return "", false
	}
	parts := strings.Split(payload, ".")
	if len(parts) != 4 || parts[0] != "v1" || parts[1] != userID.String() {
		return "", false
	}
	issued, err := strconv.ParseInt(parts[3], 10, 64)
	if err != nil || s.now().Sub(time.Unix(issued, 0)) > DeviceTTL {
		return "", false
	}
	return parts[2], true
}
