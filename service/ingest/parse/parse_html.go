package parse

import (
	"strings"

	"golang.org/x/net/html"
	"golang.org/x/net/html/atom"
)

// parseHTML walks the HTML5 parse tree (the same error-tolerant algorithm a
// browser uses, so broken markup still yields text), dropping scripts,
// styles and other non-content elements.
func parseHTML(doc *Text, s string) {
	root, err := html.Parse(strings.NewReader(s))
	if err != nil {
		// html.Parse only fails on reader errors, impossible for a string;
		// fall back to the text so the document is not lost.
		parsePlain(doc, s)
		return
	}
	w := &htmlWalker{doc: doc, kind: Paragraph}
	w.walk(root, 0)
	w.flush()
}

type htmlWalker struct {
	doc    *Text
	buf    strings.Builder
	kind   BlockKind // kind of the innermost open block element
	header []string  // header cells of the current table
}

// maxHTMLDepth bounds recursion; the HTML5 parser already caps nesting at
// 512, this keeps a hostile document from costing more than that.
const maxHTMLDepth = 512

func (w *htmlWalker) flush() {
	w.doc.add(w.kind, 0, collapseSpace(w.buf.String()))
	w.buf.Reset()
}

func (w *htmlWalker) walk(n *html.Node, depth int) {
	if depth > maxHTMLDepth || w.doc.full {
		return
	}
	switch n.Type {
	case html.TextNode:
		// A line break in the source is just white space; only <br> and
		// block boundaries break lines.
		w.buf.WriteString(strings.ReplaceAll(n.Data, "\n", " "))
		return
	case html.ElementNode:
	default:
		w.walkChildren(n, depth)
		return
	}
	switch n.DataAtom {
	case atom.Script, atom.Style, atom.Noscript, atom.Template, atom.Head, atom.Svg,
		atom.Iframe, atom.Object, atom.Canvas, atom.Select, atom.Button, atom.Nav:
		return
	case atom.H1, atom.H2, atom.H3, atom.H4, atom.H5, atom.H6:
		w.flush()
		level := int(n.Data[1] - '0')
		w.doc.add(Heading, level, collapseSpace(textContent(n, false)))
	case atom.Pre:
		w.flush()
		w.doc.add(Code, 0, textContent(n, true))
	case atom.Br:
		w.buf.WriteString("\n")
	case atom.Table:
		w.flush()
		saved := w.header
		w.header = nil
		w.walkChildren(n, depth)
		w.header = saved
	case atom.Tr:
		w.flush()
		w.row(n)
	case atom.Li, atom.Dt, atom.Dd:
		w.block(n, ListItem, depth)
	case atom.P, atom.Div, atom.Section, atom.Article, atom.Main, atom.Aside, atom.Header,
		atom.Footer, atom.Blockquote, atom.Figcaption, atom.Caption, atom.Address, atom.Ul,
		atom.Ol, atom.Dl, atom.Form, atom.Fieldset, atom.Details, atom.Summary, atom.Hr, atom.Body:
		w.block(n, Paragraph, depth)
	default:
		w.walkChildren(n, depth)
	}
}

// block emits the text gathered so far, then the element's own text as one
// block of kind; nested blocks split it where they occur.
func (w *htmlWalker) block(n *html.Node, kind BlockKind, depth int) {
	w.flush()
	saved := w.kind
	w.kind = kind
	w.walkChildren(n, depth)
	w.flush()
	w.kind = saved
}

func (w *htmlWalker) walkChildren(n *html.Node, depth int) {
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		w.walk(c, depth+1)
	}
}

// row emits a table row, labelling cells with the table's header row: the
// first row made only of <th> cells, or the first row of a <thead>.
func (w *htmlWalker) row(tr *html.Node) {
	var cells []string
	allTH := true
	for c := tr.FirstChild; c != nil; c = c.NextSibling {
		if c.Type != html.ElementNode || c.DataAtom != atom.Td && c.DataAtom != atom.Th {
			continue
		}
		if c.DataAtom != atom.Th {
			allTH = false
		}
		cells = append(cells, collapseSpace(textContent(c, false)))
	}
	if len(cells) == 0 {
		return
	}
	inHead := tr.Parent != nil && tr.Parent.DataAtom == atom.Thead
	if w.header == nil && (allTH || inHead) {
		w.header = cells
		return
	}
	w.doc.add(TableRow, 0, tableRow(w.header, cells))
}

// textContent is the text of n's subtree without non-content elements; <br>
// and block boundaries become line breaks, and so do source line breaks when
// pre is set.
func textContent(n *html.Node, pre bool) string {
	var b strings.Builder
	var walk func(*html.Node, int)
	walk = func(n *html.Node, depth int) {
		if depth > maxHTMLDepth {
			return
		}
		switch n.Type {
		case html.TextNode:
			if pre {
				b.WriteString(n.Data)
			} else {
				b.WriteString(strings.ReplaceAll(n.Data, "\n", " "))
			}
			return
		case html.ElementNode:
			switch n.DataAtom {
			case atom.Script, atom.Style, atom.Noscript, atom.Template:
				return
			case atom.Br, atom.P, atom.Div, atom.Li, atom.Tr:
				b.WriteString("\n")
			case atom.Td, atom.Th:
				b.WriteString(" ")
			}
		}
		for c := n.FirstChild; c != nil; c = c.NextSibling {
			walk(c, depth+1)
		}
	}
	walk(n, 0)
	return b.String()
}

// collapseSpace turns runs of white space into one space, keeping line
// breaks that separate text (as <br> does).
func collapseSpace(s string) string {
	lines := strings.Split(s, "\n")
	out := lines[:0]
	for _, l := range lines {
		if l = strings.Join(strings.Fields(l), " "); l != "" {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
