// Package migrations holds ragent's versioned SQL schema, embedded in the
// binary. Files are applied in lexical order, each once, by repository.Migrate.
package migrations

import "embed"

// FS holds the *.sql files.
//
//go:embed *.sql
var FS embed.FS
