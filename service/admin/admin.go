// Package admin is what is curated: knowledge bases with their members
// (managed by their managers, created by admins), the groups knowledge bases
// are shared with, the intent tree that routes questions, and the term
// mappings that rewrite jargon, and reading the audit log. Who may do what
// with a knowledge base is service.Access's decision, asked by every method
// that takes a principal; every change is recorded through service.Auditor.
package admin
