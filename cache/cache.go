// Package cache is ragent's Redis adapter for state that can be rebuilt or
// lost without harm: caches of admin data (intent tree, term mappings) with a
// Postgres fallback, and the auth use case's revocation list and failed-login
// counters.
package cache
