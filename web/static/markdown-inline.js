// The inline half of markdown.js's renderer: HTML escaping, the link
// schemes allowed, and inline, which renders one line (code spans, links,
// autolinks, citations, emphasis). The safety and time rules at the top of
// markdown.js hold here too.

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
export function inline(src, ctx, allowLinks = true) {
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
