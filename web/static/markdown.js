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

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };

export function escapeHTML(s) {
  return String(s).replace(/[&<>"']/g, (c) => ESC[c]);
}

// safeURL returns the URL if its scheme is allowed, else null.
export function safeURL(raw) {
  const url = String(raw).trim();
  // Browsers ignore ASCII control characters and whitespace inside schemes
  // ("java\tscript:"), so refuse any URL carrying them.
  if (/[\u0000-\u001f\u007f\s]/.test(url)) return null;
  return /^(https?:\/\/|mailto:)/i.test(url) ? url : null;
}

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

// ---- inline ----
//
// inline is a single left-to-right pass over the raw text of one line. It
// never runs a regular expression that can scan past the construct it is
// trying, and everything it looks up ahead (the closing run of a code span,
// the bracket closing a link label, the parenthesis closing its target) is
// found in tables built once per line, so a line renders in linear time
// whatever it holds: a model can be made to answer 12,000 "[" in a row, and
// an answer is re-rendered on every frame while it streams.

const AUTOLINK = /<((?:https?:\/\/|mailto:)[^\s<>]+)>/iy;
const BARE_URL = /https?:\/\/[^\s<>"'`]*[^\s<>"'`.,;:!?)\]}，。；：！？）」』]/iy;
const CITE = /\[(\d{1,3})\]|【(\d{1,3})】/y;
const ESCAPABLE = '\\`*_{}[]()#+-.!|~<>';

// matchAt runs a sticky regular expression at position i of s.
function matchAt(re, s, i) {
  re.lastIndex = i;
  return re.exec(s);
}

// pairs returns, for every unescaped opening character of the line, the
// index of the closing character that matches it (nesting counted), from one
// pass with a stack.
function pairs(src, open, close) {
  const match = new Map();
  const stack = [];
  for (let i = 0; i < src.length; i++) {
    const c = src[i];
    if (c === '\\') { i++; continue; }
    if (c === open) stack.push(i);
    else if (c === close && stack.length) match.set(stack.pop(), i);
  }
  return match;
}

// codeRuns indexes the backtick runs of a line by length, so the run closing
// a code span (the next run of the same length) is found without rescanning.
function codeRuns(src) {
  const byLength = new Map();
  for (let i = 0; i < src.length;) {
    if (src[i] !== '`') { i++; continue; }
    let j = i;
    while (j < src.length && src[j] === '`') j++;
    const len = j - i;
    if (!byLength.has(len)) byLength.set(len, { starts: [], next: 0 });
    byLength.get(len).starts.push(i);
    i = j;
  }
  // closing returns the start of the first run of exactly len backticks at
  // or after from. Queries come in increasing order of from, so each list is
  // walked once.
  return (len, from) => {
    const runs = byLength.get(len);
    if (!runs) return -1;
    while (runs.next < runs.starts.length && runs.starts[runs.next] < from) runs.next++;
    return runs.next < runs.starts.length ? runs.starts[runs.next] : -1;
  };
}

// linkTarget parses the inside of a link's parentheses: a destination
// (optionally in <>, with at most one level of balanced parentheses) and an
// optional "title". It returns the destination, or null when the text is
// not a link target. It stops at the first character that rules the target
// out, so nested attempts cannot rescan each other's text.
function linkTarget(src, from, to) {
  let i = from;
  while (i < to && /\s/.test(src[i])) i++;
  const angle = src[i] === '<';
  if (angle) i++;
  const start = i;
  let depth = 0;
  for (; i < to; i++) {
    const c = src[i];
    if (/\s/.test(c) || c === '<' || (c === '>' && angle)) break;
    if (c === '>') return null;
    if (c === '(') {
      if (++depth > 1) return null;
    } else if (c === ')') {
      if (--depth < 0) return null;
    }
  }
  if (depth !== 0) return null;
  const dest = src.slice(start, i);
  if (angle) {
    if (src[i] !== '>') return null;
    i++;
  }
  const gap = i;
  while (i < to && /\s/.test(src[i])) i++;
  if (i < to && src[i] === '"' && i > gap) {
    const end = src.indexOf('"', i + 1);
    if (end < 0 || end >= to) return null;
    i = end + 1;
    while (i < to && /\s/.test(src[i])) i++;
  }
  return i === to ? dest : null;
}

// inline renders one line: code spans, links and citations become tokens,
// the text between them is escaped and then given emphasis (whose markers
// survive escaping unchanged).
function inline(src, ctx, allowLinks = true) {
  let out = '';
  let text = '';
  const flush = () => { out += emphasis(escapeHTML(text)); text = ''; };
  const closingRun = codeRuns(src);
  let brackets = null; // built on the first "[" that could start a link
  let parens = null;
  let i = 0;
  while (i < src.length) {
    const c = src[i];
    let m;
    if (c === '\\' && i + 1 < src.length && ESCAPABLE.includes(src[i + 1])) {
      // Escaped punctuation is literal: emit it escaped and outside emphasis.
      flush();
      out += escapeHTML(src[i + 1]).replace(/[*_~]/g, (x) => `&#${x.charCodeAt(0)};`);
      i += 2;
      continue;
    }
    if (c === '`') {
      let j = i;
      while (j < src.length && src[j] === '`') j++;
      const end = closingRun(j - i, j);
      if (end >= 0) {
        flush();
        let code = src.slice(j, end);
        if (code.length > 2 && code[0] === ' ' && code[code.length - 1] === ' ') code = code.slice(1, -1);
        out += `<code>${escapeHTML(code)}</code>`;
        i = end + (j - i);
      } else {
        text += src.slice(i, j); // an unclosed run is literal backticks
        i = j;
      }
      continue;
    }
    if ((c === '[' || c === '【') && (m = matchAt(CITE, src, i))) {
      const n = Number(m[1] ?? m[2]);
      if (ctx.citations(n) && !(c === '[' && src[i + m[0].length] === '(')) {
        flush();
        out += `<button type="button" class="cite" data-testid="cite" data-cite="${n}" aria-label="${escapeHTML(ctx.citeLabel(n))}" title="${escapeHTML(ctx.citeLabel(n))}">${n}</button>`;
        i += m[0].length;
        continue;
      }
    }
    if (allowLinks && c === '[') {
      brackets ??= pairs(src, '[', ']');
      const close = brackets.get(i);
      if (close !== undefined && src[close + 1] === '(') {
        parens ??= pairs(src, '(', ')');
        const end = parens.get(close + 1);
        const dest = end === undefined ? null : linkTarget(src, close + 2, end);
        if (dest !== null) {
          const url = safeURL(dest);
          flush();
          const label = inline(src.slice(i + 1, close), ctx, false);
          out += url
            ? `<a href="${escapeHTML(url)}" target="_blank" rel="noopener noreferrer">${label}</a>`
            : label;
          i = end + 1;
          continue;
        }
      }
    }
    if (allowLinks && c === '<' && (m = matchAt(AUTOLINK, src, i))) {
      flush();
      out += `<a href="${escapeHTML(m[1])}" target="_blank" rel="noopener noreferrer">${escapeHTML(m[1])}</a>`;
      i += m[0].length;
      continue;
    }
    if (allowLinks && (c === 'h' || c === 'H') && (i === 0 || /[\s(（]/.test(src[i - 1])) && (m = matchAt(BARE_URL, src, i))) {
      flush();
      out += `<a href="${escapeHTML(m[0])}" target="_blank" rel="noopener noreferrer">${escapeHTML(m[0])}</a>`;
      i += m[0].length;
      continue;
    }
    text += c;
    i++;
  }
  flush();
  return out;
}

// ---- emphasis ----
//
// emphasis works on already-escaped text, so it can only wrap escaped text
// in its own tags. It keeps the rules the renderer always had (** and __
// strong, ~~ strikethrough, then * and _ emphasis, each the nearest closer
// wins), but finds closers in a table built right to left instead of by
// lazy regular expressions, which were quadratic on unclosed runs.

const isSpace = (c) => c !== undefined && /\s/.test(c);
const isWord = (c) => c !== undefined && /\w/.test(c);

function emphasis(s) {
  s = pairPass(s, '**', 'strong', false);
  s = pairPass(s, '__', 'strong', true);
  s = pairPass(s, '~~', 'del', false);
  s = singlePass(s, '*', 'em');
  s = singlePass(s, '_', 'em');
  return s;
}

// pairPass wraps text between two-character markers: the opener is followed
// by a non-space, the closer preceded by one; word markers (__) also need no
// word character before the opener or after the closer.
function pairPass(s, mk, tag, word) {
  const n = s.length;
  const closerAt = (q) => s[q] === mk[0] && s[q + 1] === mk[1] && !isSpace(s[q - 1]) && !(word && isWord(s[q + 2]));
  // next[q]: the first closer at or after q, or -1.
  const next = new Int32Array(n + 2).fill(-1);
  for (let q = n - 2; q >= 1; q--) next[q] = closerAt(q) ? q : next[q + 1];
  let out = '';
  let last = 0; // end of the previous match: its characters are spent
  let i = 0;
  while (i + 1 < n) {
    const opener = s[i] === mk[0] && s[i + 1] === mk[1] && i + 2 < n && !isSpace(s[i + 2]) &&
      !(word && i > 0 && (i - 1 < last || isWord(s[i - 1])));
    if (opener) {
      const q = i + 3 < n ? next[i + 3] : -1;
      if (q < 0) break; // no closer further on: no later opener can close either
      out += `${s.slice(last, i)}<${tag}>${s.slice(i + 2, q)}</${tag}>`;
      i = last = q + 2;
      continue;
    }
    i++;
  }
  return out + s.slice(last);
}

// singlePass wraps text between single markers with no marker inside: the
// opener follows neither a word character nor (for *) another marker and
// precedes a non-space; the closer is the next marker, after a non-space,
// followed by neither a marker (*) nor a word character (_).
function singlePass(s, mk, tag) {
  const n = s.length;
  const star = mk === '*';
  const next = new Int32Array(n + 1).fill(-1);
  for (let q = n - 1; q >= 0; q--) next[q] = s[q] === mk ? q : next[q + 1];
  let out = '';
  let last = 0;
  for (let i = 0; i < n; i++) {
    if (s[i] !== mk) continue;
    if (i > 0 && (i - 1 < last || isWord(s[i - 1]) || (star && s[i - 1] === '*'))) continue;
    if (i + 1 >= n || isSpace(s[i + 1]) || s[i + 1] === mk) continue;
    const q = next[i + 1];
    if (q < 0) break;
    if (isSpace(s[q - 1]) || (star ? s[q + 1] === '*' : isWord(s[q + 1]))) continue;
    out += `${s.slice(last, i)}<${tag}>${s.slice(i + 1, q)}</${tag}>`;
    last = q + 1;
    i = q;
  }
  return out + s.slice(last);
}
