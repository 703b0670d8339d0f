// Package admin is what administrators curate: knowledge bases, the intent
// tree that routes questions, and the term mappings that rewrite jargon.
package admin
