// A small, safe Markdown renderer for model answers.
//
// Safety rule: every piece of source text is HTML-escaped before it reaches
// the output; the renderer adds only its own fixed tags, and link targets are
// limited to http(s) and mailto. Raw HTML in the source is shown as text.
// It is built for text that grows while streaming: an unclosed code fence
// renders as code so far, a half-typed table renders as a paragraph.
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
  });
}

const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
const HR = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}>\s?(.*)$/;
const LIST_ITEM = /^( *)([-*+]|\d{1,9}[.)])(\s+|$)(.*)$/;
const TABLE_SEP = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;

function isBlank(line) {
  return line.trim() === '';
}

function startsBlock(lines, i) {
  const line = lines[i];
  return FENCE.test(line) || HEADING.test(line) || HR.test(line) || QUOTE.test(line) ||
    LIST_ITEM.test(line) || isTableStart(lines, i);
}

function isTableStart(lines, i) {
  return lines[i].includes('|') && i + 1 < lines.length && TABLE_SEP.test(lines[i + 1]) &&
    lines[i + 1].includes('-') && splitRow(lines[i]).length === splitRow(lines[i + 1]).length;
}

function renderBlocks(lines, ctx) {
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (isBlank(line)) { i++; continue; }

    let m = line.match(FENCE);
    if (m) {
      const fence = m[1];
      const lang = m[2].replace(/[^\w+#.-]/g, '');
      const body = [];
      i++;
      while (i < lines.length && !new RegExp(`^ {0,3}${fence[0]}{${fence.length},}\\s*$`).test(lines[i])) {
        body.push(lines[i]);
        i++;
      }
      i++; // the closing fence, or past the end while still streaming
      out.push(codeBlock(body.join('\n'), lang, ctx));
      continue;
    }

    m = line.match(HEADING);
    if (m) {
      const level = m[1].length;
      out.push(`<h${level}>${inline(m[2] ?? '', ctx)}</h${level}>`);
      i++;
      continue;
    }

    if (HR.test(line)) { out.push('<hr>'); i++; continue; }

    if (QUOTE.test(line)) {
      const body = [];
      while (i < lines.length && !isBlank(lines[i])) {
        const q = lines[i].match(QUOTE);
        body.push(q ? q[1] : lines[i]);
        i++;
      }
      out.push(`<blockquote>${renderBlocks(body, ctx)}</blockquote>`);
      continue;
    }

    if (LIST_ITEM.test(line)) {
      i = renderList(lines, i, ctx, out);
      continue;
    }

    if (isTableStart(lines, i)) {
      i = renderTable(lines, i, ctx, out);
      continue;
    }

    const para = [];
    while (i < lines.length && !isBlank(lines[i]) && (para.length === 0 || !startsBlock(lines, i))) {
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
      } else if (startsBlock(lines, i)) {
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
  const html = items.map((body) => {
    let inner = renderBlocks(body, ctx);
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
    // A class, not a style attribute: the page's CSP allows no inline styles.
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

// Inline tokens, tried in order at each position of the raw text.
const CODE_SPAN = /^(`+)([\s\S]*?[^`])\1(?!`)/;
const LINK = /^\[([^\]\n]*(?:\[[^\]\n]*\][^\]\n]*)*)\]\(\s*<?([^\s()<>]*(?:\([^\s()<>]*\)[^\s()<>]*)*)>?(?:\s+"[^"]*")?\s*\)/;
const AUTOLINK = /^<((?:https?:\/\/|mailto:)[^\s<>]+)>/i;
const BARE_URL = /^https?:\/\/[^\s<>"'`]*[^\s<>"'`.,;:!?)\]}，。；：！？）」』]/i;
const CITE = /^(?:\[(\d{1,3})\]|【(\d{1,3})】)/;

// inline renders one line: it walks the raw text, emitting code spans, links
// and citations as tokens and escaping everything in between before applying
// emphasis (whose markers survive escaping unchanged).
function inline(src, ctx, allowLinks = true) {
  let out = '';
  let text = '';
  const flush = () => { out += emphasis(escapeHTML(text)); text = ''; };
  let i = 0;
  while (i < src.length) {
    const rest = src.slice(i);
    const c = src[i];
    let m;
    if (c === '\\' && i + 1 < src.length && /[\\`*_{}\[\]()#+\-.!|~<>]/.test(src[i + 1])) {
      // Escaped punctuation is literal: emit it escaped and outside emphasis.
      flush();
      out += escapeHTML(src[i + 1]).replace(/[*_~]/g, (x) => `&#${x.charCodeAt(0)};`);
      i += 2;
      continue;
    }
    if (c === '`' && (m = rest.match(CODE_SPAN))) {
      flush();
      out += `<code>${escapeHTML(m[2].replace(/^ (.*) $/, '$1'))}</code>`;
      i += m[0].length;
      continue;
    }
    if ((c === '[' || c === '【') && (m = rest.match(CITE))) {
      const n = Number(m[1] ?? m[2]);
      if (ctx.citations(n) && !(c === '[' && rest[m[0].length] === '(')) {
        flush();
        out += `<button type="button" class="cite" data-testid="cite" data-cite="${n}" aria-label="${escapeHTML(ctx.citeLabel(n))}" title="${escapeHTML(ctx.citeLabel(n))}">${n}</button>`;
        i += m[0].length;
        continue;
      }
    }
    if (allowLinks && c === '[' && (m = rest.match(LINK))) {
      const url = safeURL(m[2]);
      flush();
      const label = inline(m[1], ctx, false);
      out += url
        ? `<a href="${escapeHTML(url)}" target="_blank" rel="noopener noreferrer">${label}</a>`
        : label;
      i += m[0].length;
      continue;
    }
    if (allowLinks && c === '<' && (m = rest.match(AUTOLINK))) {
      flush();
      out += `<a href="${escapeHTML(m[1])}" target="_blank" rel="noopener noreferrer">${escapeHTML(m[1])}</a>`;
      i += m[0].length;
      continue;
    }
    if (allowLinks && (c === 'h' || c === 'H') && (i === 0 || /[\s(（]/.test(src[i - 1])) && (m = rest.match(BARE_URL))) {
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

// emphasis works on already-escaped text, so it can only wrap escaped text
// in its own tags.
function emphasis(s) {
  return s
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, '<strong>$1</strong>')
    .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, '$1<strong>$2</strong>')
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, '<del>$1</del>')
    .replace(/(^|[^*\w])\*(?=[^\s*])([^*]*?[^\s*])\*(?!\*)/g, '$1<em>$2</em>')
    .replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/g, '$1<em>$2</em>');
}
