// Answer feedback page (admins): every rating with its question, answer,
// sources and conversation, filtered by knowledge base, rating and date;
// for a thumbs down, the admin marks the chunks that should have been
// found, and the export button downloads the judged downvotes as a BEIR
// folder (README "Answer feedback").
import { t } from './i18n.js';
import { h, formatTime, field, toast, errorText } from './dom.js';
import { get, put } from './api.js';
import { pageHeader } from './admin.js';
import { filteredList } from './pager.js';

export function mountFeedback(root, ctx) {
  const kb = h('select', { id: 'feedback-kb', 'data-testid': 'feedback-kb' }, h('option', { value: '' }, t('audit.any')));
  const rating = h('select', { id: 'feedback-rating', 'data-testid': 'feedback-rating' },
    h('option', { value: '' }, t('audit.any')),
    h('option', { value: 'down' }, t('feedback.down')),
    h('option', { value: 'up' }, t('feedback.up')));
  const since = h('input', { id: 'feedback-since', type: 'date', 'data-testid': 'feedback-since' });
  const until = h('input', { id: 'feedback-until', type: 'date', 'data-testid': 'feedback-until' });
  const exportBtn = h('button', { type: 'button', class: 'btn', 'data-testid': 'feedback-export' }, t('feedback.export'));

  function query() {
    const q = new URLSearchParams();
    if (kb.value) q.set('knowledgeBaseId', kb.value);
    if (rating.value) q.set('rating', rating.value);
    if (since.value) q.set('since', since.value);
    if (until.value) q.set('until', until.value);
    return q;
  }

  function row(f) {
    const marked = new Set(f.relevantChunkIds ?? []);
    const boxes = (f.sources ?? []).map((src) => {
      const box = h('input', { type: 'checkbox', 'data-testid': 'feedback-right-chunk', 'data-chunk-id': src.chunkId, checked: marked.has(src.chunkId) });
      return h('li', {}, h('label', {}, box, ` [${src.index}] ${src.documentName || src.documentId}`), h('p', { class: 'muted' }, src.excerpt ?? ''));
    });
    // A right chunk the answer did not cite is added by id.
    const extra = h('input', { 'data-testid': 'feedback-extra-chunks', placeholder: t('feedback.extraHint'), value: [...marked].filter((id) => !(f.sources ?? []).some((s) => s.chunkId === id)).join(' ') });
    const save = h('button', { type: 'button', class: 'btn btn-sm', 'data-testid': 'feedback-judge', onClick: async () => {
      const ids = [...tr.querySelectorAll('[data-testid=feedback-right-chunk]')].filter((b) => b.checked).map((b) => b.dataset.chunkId);
      ids.push(...extra.value.split(/[\s,]+/).filter(Boolean));
      try { await put(`/admin/feedback/${encodeURIComponent(f.id)}/chunks`, { chunkIds: ids }); toast(t('curate.saved'), 'info'); } catch (err) { toast(errorText(err)); }
    } }, t('feedback.markRight'));
    const tr = h('tr', { 'data-testid': 'feedback-row', 'data-rating': f.rating, 'data-message-id': f.messageId },
      h('td', { title: f.createdAt }, formatTime(f.createdAt), h('br'), h('small', { class: 'muted' }, f.username || ''),
        h('br'), h('a', { href: `#/chat/${encodeURIComponent(f.conversationId)}`, 'data-testid': 'feedback-conversation' }, t('feedback.conversation'))),
      h('td', {}, h('span', { class: f.rating === 'down' ? 'badge badge-bad' : 'badge badge-ok' }, f.rating === 'down' ? '👎' : '👍'),
        f.comment ? h('p', { class: 'wrap', 'data-testid': 'feedback-comment-text' }, f.comment) : null),
      h('td', { class: 'wrap', 'data-testid': 'feedback-question' }, f.question || ''),
      h('td', { class: 'wrap' }, h('pre', { class: 'chunk-content' }, f.answer || '')),
      h('td', { class: 'wrap' }, h('ul', { class: 'feedback-sources' }, ...boxes), extra, save));
    return tr;
  }

  const { form, table, more, list } = filteredList({
    name: 'feedback',
    fields: [
      field(t('feedback.kb'), kb), field(t('feedback.rating'), rating),
      field(t('audit.since'), since), field(t('audit.until'), until)],
    actions: [exportBtn],
    columns: [t('audit.time'), t('feedback.rating'), t('feedback.question'), t('feedback.answer'), t('feedback.sources')],
    path: '/admin/feedback',
    query,
    row,
    empty: t('feedback.empty'),
    ctx,
  });
  root.append(h('div', { class: 'page' }, pageHeader(t('feedback.title'), t('feedback.subtitle')), form, table, more));

  async function loadKBs() {
    try {
      const res = await get('/knowledge-bases?limit=200');
      if (list.destroyed()) return;
      kb.append(...(res?.items ?? []).map((k) => h('option', { value: k.id }, k.name)));
    } catch { /* the filter stays "any" */ }
  }

  exportBtn.addEventListener('click', async () => {
    const q = new URLSearchParams();
    if (kb.value) q.set('knowledgeBaseId', kb.value);
    if (since.value) q.set('since', since.value);
    if (until.value) q.set('until', until.value);
    const res = await fetch(`/api/v1/admin/feedback/export?${q}`, { credentials: 'same-origin' });
    if (!res.ok) {
      let msg = res.statusText;
      try { msg = (await res.json()).error.message; } catch { /* keep the status text */ }
      toast(msg);
      return;
    }
    const url = URL.createObjectURL(await res.blob());
    const a = h('a', { href: url, download: 'ragent-feedback.zip' });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  });
  loadKBs();
  list.load(false);
  return list;
}
