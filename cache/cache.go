// Package cache is ragent's Redis adapter for state that can be rebuilt or
// lost without harm: caches of admin data (intent tree, term mappings) with a
// Postgres fallback, the auth use case's revocation list and failed-login
// counters, and the model endpoints' cooldowns shared by every instance.
package cache
