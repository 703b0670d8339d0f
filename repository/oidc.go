package repository

import (
	"context"
	"database/sql"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/ragent-go/ragent/service"
)

// UserByIdentity returns the live user the identity provider issuer knows as
// subject.
func (s *Store) UserByIdentity(ctx context.Context, issuer, subject string) (*service.User, error) {
	return take(s.conn(ctx).Where("oidc_issuer = ? AND oidc_subject = ?", issuer, subject), userRow.user)
}

// PutOIDCLogin records a login in flight.
func (s *Store) PutOIDCLogin(ctx context.Context, l service.OIDCLogin) error {
	return translate(s.conn(ctx).Exec(`INSERT INTO oidc_logins (state, nonce, code_verifier, return_to, expires_at)
		VALUES (?, ?, ?, ?, ?)`, l.State, l.Nonce, l.Verifier, l.ReturnTo, l.Expires).Error)
}

// TakeOIDCLogin deletes and returns the login in flight with state, if it
// has not expired by now: one statement, so of two callbacks with the same
// state (on any instances) exactly one gets it. Unknown, used and expired
// states are service.ErrNotFound.
func (s *Store) TakeOIDCLogin(ctx context.Context, state string, now time.Time) (*service.OIDCLogin, error) {
	var l service.OIDCLogin
	err := s.conn(ctx).Raw(`DELETE FROM oidc_logins WHERE state = ? RETURNING state, nonce, code_verifier, return_to, expires_at`, state).
		Row().Scan(&l.State, &l.Nonce, &l.Verifier, &l.ReturnTo, &l.Expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, service.ErrNotFound
	}
	if err != nil {
		return nil, translate(err)
	}
	if !l.Expires.After(now) {
		return nil, service.ErrNotFound
	}
	return &l, nil
}

// PutOIDCSession records the provider's side of a ragent session.
func (s *Store) PutOIDCSession(ctx context.Context, o service.OIDCSession) error {
	return translate(s.conn(ctx).Exec(`INSERT INTO oidc_sessions (token_id, user_id, refresh_token, id_token, checked_at, expires_at)
		VALUES (?, ?, ?, ?, ?, ?)`, o.TokenID, int64(o.UserID), o.RefreshToken, o.IDToken, o.CheckedAt, o.Expires).Error)
}

// OIDCSession returns the provider's side of the ragent session tokenID.
func (s *Store) OIDCSession(ctx context.Context, tokenID string) (*service.OIDCSession, error) {
	var (
		o    service.OIDCSession
		user int64
	)
	err := s.conn(ctx).Raw(`SELECT token_id, user_id, refresh_token, id_token, checked_at, expires_at FROM oidc_sessions WHERE token_id = ?`, tokenID).
		Row().Scan(&o.TokenID, &user, &o.RefreshToken, &o.IDToken, &o.CheckedAt, &o.Expires)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, service.ErrNotFound
	}
	if err != nil {
		return nil, translate(err)
	}
	o.UserID = service.ID(user)
	return &o, nil
}

// ClaimOIDCCheck moves the session's last check from seen to now, and
// reports whether this call did: of the requests that find a re-check due
// at once (on any instances), one asks the provider.
func (s *Store) ClaimOIDCCheck(ctx context.Context, tokenID string, seen, now time.Time) (bool, error) {
	res := s.conn(ctx).Exec(`UPDATE oidc_sessions SET checked_at = ? WHERE token_id = ? AND checked_at = ?`, now, tokenID, seen)
	return res.RowsAffected == 1, translate(res.Error)
}

// SetOIDCCheck sets the session's last check (back, after the provider
// could not be asked) and, when refreshToken is not empty, its tokens.
func (s *Store) SetOIDCCheck(ctx context.Context, tokenID string, checked time.Time, refreshToken, idToken string) error {
	if refreshToken == "" {
		return translate(s.conn(ctx).Exec(`UPDATE oidc_sessions SET checked_at = ? WHERE token_id = ?`, checked, tokenID).Error)
	}
	return translate(s.conn(ctx).Exec(`UPDATE oidc_sessions SET checked_at = ?, refresh_token = ?, id_token = COALESCE(NULLIF(?, ''), id_token)
		WHERE token_id = ?`, checked, refreshToken, idToken, tokenID).Error)
}

// DeleteOIDCSession forgets the provider's side of a session (at logout).
func (s *Store) DeleteOIDCSession(ctx context.Context, tokenID string) error {
	return translate(s.conn(ctx).Exec(`DELETE FROM oidc_sessions WHERE token_id = ?`, tokenID).Error)
}

// DeleteUserOIDCSessions forgets every provider session of a user, whose
// ragent sessions have all ended.
func (s *Store) DeleteUserOIDCSessions(ctx context.Context, userID service.ID) error {
	return translate(s.conn(ctx).Exec(`DELETE FROM oidc_sessions WHERE user_id = ?`, int64(userID)).Error)
}

// PruneOIDC forgets logins in flight and sessions that expired before t.
func (s *Store) PruneOIDC(ctx context.Context, before time.Time) (int64, error) {
	var n int64
	err := s.WithinTx(ctx, func(tx *Store) error {
		for _, q := range []string{`DELETE FROM oidc_logins WHERE expires_at < ?`, `DELETE FROM oidc_sessions WHERE expires_at < ?`} {
			res := tx.db.Exec(q, before)
			if res.Error != nil {
				return translate(res.Error)
			}
			n += res.RowsAffected
		}
		return nil
	})
	return n, err
}

// SyncOIDCGroups makes the user's memberships in provider-managed groups
// exactly names, in one transaction: a group of a name that does not exist
// is created managed, one that exists unmanaged is adopted (marked
// managed: from now on the provider decides its members), memberships of
// managed groups not among names are removed. Memberships of local groups
// stay. It returns the group names joined and left.
func (s *Store) SyncOIDCGroups(ctx context.Context, userID service.ID, names []string, newID func() (service.ID, error)) (joined, left []string, err error) {
	// Most logins bring the groups the user already has: one read, and no
	// transaction, settles those (every held managed group is already the
	// provider's, so nothing needs adopting either).
	if same, err := s.holdsExactly(ctx, userID, names); err != nil || same {
		return nil, nil, err
	}
	err = s.WithinTx(ctx, func(tx *Store) error {
		joined, left = nil, nil
		want := make(map[int64]string, len(names))
		for _, name := range names {
			id, err := newID()
			if err != nil {
				return err
			}
			// ON CONFLICT on the unique lower(name) index: two logins that
			// bring the same new group create it once.
			if err := tx.db.Exec(`INSERT INTO groups (id, name, description, managed_by) VALUES (?, ?, 'managed by the identity provider', 'oidc')
				ON CONFLICT ((lower(name))) DO UPDATE SET managed_by = 'oidc', updated_at = now() WHERE groups.managed_by = ''`,
				int64(id), name).Error; err != nil {
				return translate(err)
			}
			var gid int64
			if err := tx.db.Raw(`SELECT id FROM groups WHERE lower(name) = lower(?)`, name).Row().Scan(&gid); err != nil {
				return translate(err)
			}
			want[gid] = name
		}
		var have []struct {
			ID   int64
			Name string
		}
		if err := tx.db.Raw(`SELECT g.id, g.name FROM group_members gm JOIN groups g ON g.id = gm.group_id
			WHERE gm.user_id = ? AND g.managed_by = 'oidc'`, int64(userID)).Scan(&have).Error; err != nil {
			return translate(err)
		}
		held := make(map[int64]bool, len(have))
		for _, h := range have {
			held[h.ID] = true
			if _, ok := want[h.ID]; !ok {
				if err := tx.db.Exec(`DELETE FROM group_members WHERE group_id = ? AND user_id = ?`, h.ID, int64(userID)).Error; err != nil {
					return translate(err)
				}
				left = append(left, h.Name)
			}
		}
		for gid, name := range want {
			if held[gid] {
				continue
			}
			if err := tx.db.Exec(`INSERT INTO group_members (group_id, user_id) VALUES (?, ?) ON CONFLICT DO NOTHING`, gid, int64(userID)).Error; err != nil {
				return translate(err)
			}
			joined = append(joined, name)
		}
		return nil
	})
	slices.SortFunc(joined, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	slices.SortFunc(left, func(a, b string) int { return strings.Compare(strings.ToLower(a), strings.ToLower(b)) })
	return joined, left, err
}

// holdsExactly reports whether the user's memberships in managed groups
// are exactly names (case-insensitively).
func (s *Store) holdsExactly(ctx context.Context, userID service.ID, names []string) (bool, error) {
	var have []string
	if err := s.conn(ctx).Raw(`SELECT lower(g.name) FROM group_members gm JOIN groups g ON g.id = gm.group_id
		WHERE gm.user_id = ? AND g.managed_by = 'oidc'`, int64(userID)).Scan(&have).Error; err != nil {
		return false, translate(err)
	}
	want := make([]string, len(names))
	for i, n := range names {
		want[i] = strings.ToLower(n)
	}
	slices.Sort(have)
	slices.Sort(want)
	return slices.Equal(have, slices.Compact(want)), nil
}
