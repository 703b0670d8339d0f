// A small, safe Markdown renderer for model answers.
//
// Safety rule: every piece of source text is HTML-escaped before it reaches
// the output; the renderer adds only its own fixed tags, and link targets are
// limited to http(s) and mailto. Raw HTML in the source is shown as text.
// It is built for text that grows while streaming: an unclosed code fence
// renders as code so far, a half-typed table renders as a paragraph.
//
// Time rule: rendering is linear in the length of the source, whatever it
// holds (answers are re-rendered on every frame while they stream, and a
// model can be talked into writing 12,000 "[" in a row). No regular
// expression here can backtrack over more than the construct it matches;
// lookups ahead use tables built once per line; nesting and table width
// are bounded. The browser test renders a table of hostile inputs with a
// time budget.
//
// Supported: fenced code (``` and ~~~), inline code, ATX headings, bold,
// italic, strikethrough, ordered/unordered (nested) lists, blockquotes,
// GFM tables with alignment, horizontal rules, links and autolinks,
// paragraphs with hard line breaks, and [n] citations (when opts.citations
// says n is a known source).
//
// This module splits the source into blocks; markdown-inline.js renders the
// text of each line (escaping, code spans, links, citations, emphasis).
import { escapeHTML, inline } from './markdown-inline.js';

// renderMarkdown returns HTML for src. opts.citations: a function n → bool
// telling which [n] markers link to a source; opts.citeLabel: a function
// n → the accessible name of citation button n; opts.copyLabel: the
// accessible name of the copy button on code blocks. The caller passes
// translated labels: this module has no dictionary of its own.
export function renderMarkdown(src, opts = {}) {
  const lines = String(src ?? '').replace(/\r\n?/g, '\n').split('\n');
  return renderBlocks(lines, {
    citations: opts.citations ?? (() => false),
    citeLabel: opts.citeLabel ?? ((n) => `[${n}]`),
    copyLabel: opts.copyLabel ?? 'Copy',
    depth: 0,
  });
}

// The block patterns are anchored and have no two adjacent quantifiers that
// can match the same characters, so each runs in linear time on a line
// (fences and headings are split by hand for that reason).
const FENCE_OPEN = /^ {0,3}(`{3,}|~{3,})/;
const HEADING_OPEN = /^ {0,3}(#{1,6})(?=\s|$)/;
const HR = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const LIST_ITEM = /^( *)([-*+]|\d{1,9}[.)])(\s+|$)(.*)$/;
const TABLE_SEP = /^\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?$/;

// MAX_NESTING bounds nested quotes and lists: each level re-renders the
// lines inside it, so a line of 10,000 ">" would otherwise cost quadratic
// time and overflow the stack. Deeper markers render as text.
const MAX_NESTING = 16;

function isBlank(line) {
  return line.trim() === '';
}

// fence returns the marker and language of an opening code fence, or null.
function fence(line) {
  const m = line.match(FENCE_OPEN);
  if (!m) return null;
  const info = line.slice(m[0].length);
  if (m[1][0] === '`' && info.includes('`')) return null;
  return { marker: m[1], lang: info.trim().split(/\s/, 1)[0] };
}

// heading returns the level and text of an ATX heading, or null. A closing
// run of # is dropped only after a space ("# C#" keeps its #).
function heading(line) {
  const m = line.match(HEADING_OPEN);
  if (!m) return null;
  let text = line.slice(m[0].length).trim();
  let j = text.length;
  while (j > 0 && text[j - 1] === '#') j--;
  if (j < text.length && (j === 0 || /\s/.test(text[j - 1]))) text = text.slice(0, j).trimEnd();
  return { level: m[1].length, text };
}

function nests(ctx) {
  return ctx.depth < MAX_NESTING;
}

function startsBlock(lines, i, ctx) {
  const line = lines[i];
  return fence(line) !== null || heading(line) !== null || HR.test(line) ||
    (nests(ctx) && (QUOTE.test(line) || LIST_ITEM.test(line))) || isTableStart(lines, i);
}

// MAX_TABLE_COLUMNS bounds a table's width: every row is padded to the
// header's cells, so a header of thousands of cells over thousands of short
// rows would make output quadratic in the input. Wider "tables" stay text.
const MAX_TABLE_COLUMNS = 64;

function isTableStart(lines, i) {
  if (!lines[i].includes('|') || i + 1 >= lines.length || !lines[i + 1].includes('-') ||
    !TABLE_SEP.test(lines[i + 1].trim())) return false;
  const cols = splitRow(lines[i]).length;
  return cols <= MAX_TABLE_COLUMNS && cols === splitRow(lines[i + 1]).length;
}

function renderBlocks(lines, ctx) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (isBlank(line)) { i++; continue; }

    const f = fence(line);
    if (f) {
      const lang = f.lang.replace(/[^\w+#.-]/g, '');
      const closing = new RegExp(`^ {0,3}${f.marker[0]}{${f.marker.length},}[ \\t]*$`);
      const body = [];
      i++;
      while (i < lines.length && !closing.test(lines[i])) {
        body.push(lines[i]);
        i++;
      }
      i++; // the closing fence, or past the end while still streaming
      out.push(codeBlock(body.join('\n'), lang, ctx));
      continue;
    }

    const hd = heading(line);
    if (hd) {
      out.push(`<h${hd.level}>${inline(hd.text, ctx)}</h${hd.level}>`);
      i++;
      continue;
    }

    if (HR.test(line)) { out.push('<hr>'); i++; continue; }

    if (nests(ctx) && QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && !isBlank(lines[i])) {
        const q = lines[i].match(QUOTE);
        body.push(q ? q[1] : lines[i]);
        i++;
      }
      out.push(`<blockquote>${renderBlocks(body, { ...ctx, depth: ctx.depth + 1 })}</blockquote>`);
      continue;
    }

    if (nests(ctx) && LIST_ITEM.test(line)) {
      i = renderList(lines, i, ctx, out);
      continue;
    }

    if (isTableStart(lines, i)) {
      i = renderTable(lines, i, ctx, out);
      continue;
    }

    const para = [];
    while (i < lines.length && !isBlank(lines[i]) && (para.length === 0 || !startsBlock(lines, i, ctx))) {
      para.push(lines[i].trim());
      i++;
    }
    out.push(`<p>${para.map((l) => inline(l, ctx)).join('<br>')}</p>`);
  }
  return out.join('\n');
}

// COPY_ICON is a constant of this module, not source text.
const COPY_ICON = '<svg viewBox="0 0 24 24" width="14" height="14" fill="none" stroke="currentColor" stroke-width="2" stroke-linecap="round" stroke-linejoin="round" aria-hidden="true" focusable="false"><rect x="9" y="9" width="12" height="12" rx="2"/><path d="M5 15H4a1 1 0 0 1-1-1V4a1 1 0 0 1 1-1h10a1 1 0 0 1 1 1v1"/></svg>';

function codeBlock(code, lang, ctx) {
  const cls = lang ? ` class="language-${escapeHTML(lang)}"` : '';
  const label = lang ? `<span class="code-lang">${escapeHTML(lang)}</span>` : '<span class="code-lang"></span>';
  return `<div class="code-block"><div class="code-head">${label}<button type="button" class="copy-code" data-copy-code aria-label="${escapeHTML(ctx.copyLabel)}" title="${escapeHTML(ctx.copyLabel)}">${COPY_ICON}</button></div><pre><code${cls}>${escapeHTML(code)}</code></pre></div>`;
}

// renderList consumes a list starting at lines[start] and returns the index
// after it. Items are split at lines with the same or lower indent that start
// a new marker; each item's body is rendered recursively, so nesting works.
function renderList(lines, start, ctx, out) {
  const first = lines[start].match(LIST_ITEM);
  const baseIndent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const items = [];
  let loose = false;
  let i = start;
  while (i < lines.length) {
    const m = lines[i].match(LIST_ITEM);
    if (!m || m[1].length !== baseIndent || /\d/.test(m[2]) !== ordered) break;
    const contentIndent = m[1].length + m[2].length + Math.max(1, Math.min(m[3].length, 4));
    const body = [m[4]];
    i++;
    while (i < lines.length) {
      const l = lines[i];
      if (isBlank(l)) {
        // A blank line continues the item only if indented content follows.
        let j = i;
        while (j < lines.length && isBlank(lines[j])) j++;
        if (j < lines.length && indentOf(lines[j]) >= contentIndent) {
          loose = true;
          for (; i < j; i++) body.push('');
          continue;
        }
        if (j < lines.length && lines[j].match(LIST_ITEM)?.[1].length === baseIndent) loose = true;
        break;
      }
      const sub = l.match(LIST_ITEM);
      if (sub && sub[1].length <= baseIndent) break;
      if (indentOf(l) >= Math.min(contentIndent, baseIndent + 2)) {
        body.push(l.slice(Math.min(indentOf(l), contentIndent)));
      } else if (startsBlock(lines, i, ctx)) {
        break;
      } else {
        body.push(l.trim()); // lazy paragraph continuation
      }
      i++;
    }
    items.push(body);
    if (i < lines.length && isBlank(lines[i])) {
      let j = i;
      while (j < lines.length && isBlank(lines[j])) j++;
      if (j < lines.length && lines[j].match(LIST_ITEM)?.[1].length === baseIndent && /\d/.test(lines[j].match(LIST_ITEM)[2]) === ordered) {
        i = j;
      }
    }
  }
  const startNum = ordered ? Number.parseInt(first[2], 10) : 1;
  const open = ordered ? (startNum !== 1 ? `<ol start="${startNum}">` : '<ol>') : '<ul>';
  const inside = { ...ctx, depth: ctx.depth + 1 };
  const html = items.map((body) => {
    let inner = renderBlocks(body, inside);
    if (!loose) inner = inner.replace(/^<p>([\s\S]*?)<\/p>/, '$1');
    return `<li>${inner}</li>`;
  }).join('');
  out.push(`${open}${html}${ordered ? '</ol>' : '</ul>'}`);
  return i;
}

function indentOf(line) {
  return line.match(/^ */)[0].length;
}

// splitRow splits a table row on pipes that are neither escaped nor inside
// inline code.
function splitRow(line) {
  let s = line.trim();
  if (s.startsWith('|')) s = s.slice(1);
  if (s.endsWith('|') && !s.endsWith('\\|')) s = s.slice(0, -1);
  const cells = [];
  let cur = '';
  let inCode = false;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === '\\' && s[i + 1] === '|') { cur += '|'; i++; continue; }
    if (c === '`') inCode = !inCode;
    if (c === '|' && !inCode) { cells.push(cur.trim()); cur = ''; continue; }
    cur += c;
  }
  cells.push(cur.trim());
  return cells;
}

function renderTable(lines, start, ctx, out) {
  const head = splitRow(lines[start]);
  const aligns = splitRow(lines[start + 1]).map((c) => {
    const l = c.startsWith(':');
    const r = c.endsWith(':');
    return l && r ? 'center' : r ? 'right' : l ? 'left' : '';
  });
  const cell = (tag, text, k) => {
    // A class, not a style attribute: a Content-Security-Policy without
    // 'unsafe-inline' styles drops style attributes in inserted HTML.
    const a = aligns[k] ? ` class="align-${aligns[k]}"` : '';
    return `<${tag}${a}>${inline(text ?? '', ctx)}</${tag}>`;
  };
  let i = start + 2;
  const rows = [];
  while (i < lines.length && !isBlank(lines[i]) && lines[i].includes('|')) {
    const cells = splitRow(lines[i]);
    rows.push(`<tr>${head.map((_, k) => cell('td', cells[k], k)).join('')}</tr>`);
    i++;
  }
  out.push(`<div class="table-wrap"><table><thead><tr>${head.map((c, k) => cell('th', c, k)).join('')}</tr></thead><tbody>${rows.join('')}</tbody></table></div>`);
  return i;
}
