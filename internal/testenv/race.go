//go:build race

package testenv

// Race reports whether the tests were built with the race detector, which
// makes CPU-bound work (parsing tens of megabytes of a hostile file) about
// twenty times slower: such tests scale their inputs down under it.
const Race = true
