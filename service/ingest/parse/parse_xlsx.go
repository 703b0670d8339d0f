package parse

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/xuri/excelize/v2"
)

// parseXLSX emits each sheet as a heading followed by its rows, each row
// labelled with the sheet's header row when the first row looks like one.
func parseXLSX(ctx context.Context, r io.ReaderAt, size int64, limits Limits) (*Text, error) {
	// Check the container first: excelize would otherwise decompress
	// whatever the file declares before our limits apply.
	if _, err := openZip(r, size, limits); err != nil {
		return nil, err
	}
	xmlLimit := min(int64(16<<20), limits.MaxDecompressedBytes)
	f, err := excelize.OpenReader(io.NewSectionReader(r, 0, size), excelize.Options{
		UnzipSizeLimit:    limits.MaxDecompressedBytes,
		UnzipXMLSizeLimit: xmlLimit,
	})
	if err != nil {
		if strings.Contains(err.Error(), "size limit") {
			return nil, fmt.Errorf("%w: xlsx: %v", ErrTooLarge, err)
		}
		return nil, fmt.Errorf("%w: xlsx: %v", ErrCorrupt, err)
	}
	defer f.Close() // removes the temporary files of large sheets
	doc := newText(limits)
	var total int64
	for _, sheet := range f.GetSheetList() {
		doc.add(Heading, 1, sheet)
		rows, err := f.Rows(sheet)
		if err != nil {
			return nil, fmt.Errorf("%w: xlsx sheet %q: %v", ErrCorrupt, sheet, err)
		}
		var table tableRows
		for rows.Next() {
			if err := ctx.Err(); err != nil {
				rows.Close()
				return nil, err
			}
			if total++; total > limits.MaxRows {
				rows.Close()
				return nil, fmt.Errorf("%w: more than %d rows", ErrTooLarge, limits.MaxRows)
			}
			cells, err := rows.Columns()
			if err != nil {
				rows.Close()
				return nil, fmt.Errorf("%w: xlsx sheet %q: %v", ErrCorrupt, sheet, err)
			}
			if joinCells(cells) == "" {
				continue
			}
			table.add(doc, cells)
			if err := doc.textErr(); err != nil {
				rows.Close()
				return nil, err
			}
		}
		err = rows.Error()
		rows.Close()
		if err != nil {
			return nil, fmt.Errorf("%w: xlsx sheet %q: %v", ErrCorrupt, sheet, err)
		}
		table.end(doc)
	}
	if !hasContent(doc) {
		return &Text{}, nil
	}
	return doc, nil
}

// hasContent reports whether doc holds anything besides headings, so that
// a workbook of empty sheets counts as empty.
func hasContent(doc *Text) bool {
	for _, b := range doc.Blocks {
		if b.Kind != Heading {
			return true
		}
	}
	return false
}
