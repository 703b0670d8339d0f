// Documents of one knowledge base: drag-and-drop upload with per-file
// progress, live ingestion status, chunk preview, reindex and delete.
import { t } from './i18n.js';
import { h, toast, errorText, modal, formatTime, formatBytes, confirmDialog } from './dom.js';
import { get, post, patch, del, enc, upload } from './api.js';
import { pageHeader, emptyRow, rowAction, act, confirmDelete } from './admin.js';
import { reembedBadge } from './knowledgebases.js';

const POLL_MS = 2000;
const PARALLEL_UPLOADS = 3;
// The server returns at most 200 items a page; the list follows the cursor
// for up to this many pages.
const PAGE_SIZE = 200;
const MAX_PAGES = 25;
const ACCEPT = '.txt,.md,.markdown,.html,.htm,.pdf,.docx,.pptx,.xlsx,.csv,.png,.jpg,.jpeg,.tif,.tiff,.webp';

export function mountDocuments(root, ctx) {
  const kbId = ctx.params.kbId;
  let docs = [];
  let destroyed = false;
  let pollTimer = 0;
  let loading = false;
  let reloadAfter = false; // a load was asked for while one was in flight
  const queue = []; // upload items waiting for a slot
  const following = new Set(); // uploaded items that show their document's status
  let active = 0;
  // Viewers see the list and chunks; upload, reindex and delete need the
  // editor role (the server checks; this only hides what would fail).
  let canEdit = ctx.user?.role === 'admin';

  const heading = pageHeader(t('docs.title'), '');
  const subtitle = heading.appendChild(h('p', { class: 'muted', 'data-testid': 'docs-subtitle' }));
  const fileInput = h('input', { id: 'upload-input', type: 'file', multiple: true, accept: ACCEPT, class: 'visually-hidden', 'data-testid': 'upload-input' });
  const dropzone = h('label', { for: 'upload-input', class: 'dropzone', 'data-testid': 'upload-dropzone' },
    fileInput,
    h('span', { class: 'dropzone-icon', 'aria-hidden': 'true' }, '⇪'),
    h('strong', {}, t('docs.dropTitle')),
    h('span', { class: 'muted' }, t('docs.dropHint')));
  const uploads = h('ul', { class: 'upload-list', 'aria-label': t('docs.uploads'), 'aria-live': 'polite' });
  const clearFinished = h('button', { type: 'button', class: 'btn btn-sm btn-ghost', hidden: true, onClick: clearUploads }, t('docs.clearFinished'));
  const tbody = h('tbody');
  const pollNote = h('span', { class: 'muted poll-note', 'aria-live': 'off' });
  const uploadCard = h('section', { class: 'card', 'aria-label': t('docs.upload'), hidden: !canEdit }, dropzone, uploads,
    h('div', { class: 'upload-foot' }, clearFinished));

  // A question and its answer go into the knowledge base's manual
  // document, which no reindex rebuilds.
  const qaQuestion = h('input', { id: 'qa-question', 'data-testid': 'qa-question', autocomplete: 'off' });
  const qaAnswer = h('textarea', { id: 'qa-answer', rows: 2, 'data-testid': 'qa-answer' });
  const qaCard = h('form', { class: 'card form-card', 'data-testid': 'qa-form', hidden: !canEdit, 'aria-label': t('curate.qaTitle') },
    h('h2', {}, t('curate.qaTitle')),
    h('label', { for: 'qa-question' }, t('curate.question')), qaQuestion,
    h('label', { for: 'qa-answer' }, t('curate.answer')), qaAnswer,
    h('div', { class: 'form-actions' }, h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'qa-submit' }, t('curate.add'))));
  qaCard.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      await post(`/knowledge-bases/${enc(kbId)}/chunks`, { question: qaQuestion.value, answer: qaAnswer.value });
      qaQuestion.value = ''; qaAnswer.value = '';
      toast(t('curate.saved'), 'info');
      load();
    } catch (err) { toast(errorText(err)); }
  });

  root.append(h('div', { class: 'page' },
    h('p', { class: 'breadcrumb' }, h('a', { href: '#/admin/kb' }, '← ', t('nav.kb'))),
    heading,
    uploadCard,
    qaCard,
    h('div', { class: 'section-head' }, h('h2', {}, t('docs.list')), pollNote,
      h('button', { type: 'button', class: 'btn btn-sm', onClick: () => load() }, t('common.refresh'))),
    h('div', { class: 'table-wrap card' }, h('table', { class: 'table', 'data-testid': 'doc-table' },
      h('thead', {}, h('tr', {},
        h('th', { scope: 'col' }, t('docs.name')),
        h('th', { scope: 'col' }, t('common.status')),
        h('th', { scope: 'col', class: 'num' }, t('docs.chunks')),
        h('th', { scope: 'col', class: 'num' }, t('docs.size')),
        h('th', { scope: 'col' }, t('common.updated')),
        h('th', { scope: 'col' }, t('common.actions')))),
      tbody))));

  // ---- upload ----
  fileInput.addEventListener('change', () => {
    addFiles(fileInput.files);
    fileInput.value = '';
  });
  for (const ev of ['dragenter', 'dragover']) {
    dropzone.addEventListener(ev, (e) => {
      e.preventDefault();
      dropzone.classList.add('dragging');
    });
  }
  dropzone.addEventListener('dragleave', (e) => {
    if (!dropzone.contains(e.relatedTarget)) dropzone.classList.remove('dragging');
  });
  dropzone.addEventListener('drop', (e) => {
    e.preventDefault();
    dropzone.classList.remove('dragging');
    addFiles(e.dataTransfer?.files ?? []);
  });
  // A file dropped beside the zone would make the browser navigate to it.
  const blockDrop = (e) => { if (!dropzone.contains(e.target)) e.preventDefault(); };
  window.addEventListener('dragover', blockDrop);
  window.addEventListener('drop', blockDrop);

  function addFiles(files) {
    for (const file of files) {
      const item = uploadItem(file);
      uploads.prepend(item.el);
      queue.push(item);
    }
    pump();
  }

  function pump() {
    while (!destroyed && active < PARALLEL_UPLOADS && queue.length > 0) {
      const item = queue.shift();
      active++;
      item.start().finally(() => {
        active--;
        pump();
      });
    }
  }

  function uploadItem(file) {
    const progress = h('progress', { max: '1', value: '0', 'data-testid': 'upload-progress', 'aria-label': t('docs.progress', { name: file.name }) });
    const stateText = h('span', { class: 'upload-state' }, t('docs.waiting'));
    const actions = h('span', { class: 'upload-actions' });
    const el = h('li', { class: 'upload-item', 'data-testid': 'upload-item', 'data-state': 'waiting', 'data-name': file.name },
      h('span', { class: 'upload-name', title: file.name }, file.name),
      h('span', { class: 'muted' }, formatBytes(file.size)),
      progress, stateText, actions);
    let xhr = null;

    const setState = (state, text) => {
      el.dataset.state = state;
      stateText.textContent = text;
      actions.replaceChildren();
    };
    // finish marks an item nothing more will happen to, so "clear" may drop it.
    const finish = () => {
      el.dataset.finished = 'true';
      updateClearButton();
    };
    const retryButton = () => h('button', {
      type: 'button', class: 'btn btn-sm', 'data-testid': 'upload-retry',
      onClick: () => { queue.push(item); setState('waiting', t('docs.waiting')); pump(); },
    }, t('chat.retry'));

    const item = {
      el,
      docId: '',
      async start() {
        setState('uploading', '0%');
        progress.value = 0;
        xhr = upload(kbId, file, (p) => {
          progress.value = p;
          stateText.textContent = `${Math.round(p * 100)}%`;
        });
        try {
          const doc = await xhr.promise;
          setState('done', t('docs.uploaded'));
          item.docId = doc?.id ?? '';
          if (item.docId) {
            following.add(item);
            if (!docs.some((d) => d.id === doc.id)) docs.unshift(doc);
            render();
          } else {
            finish();
          }
          schedulePoll(0);
        } catch (err) {
          if (destroyed || err?.name === 'AbortError') return;
          if (err.status === 409 && err.details?.documentId) {
            const id = err.details.documentId;
            setState('duplicate', t('docs.duplicate'));
            finish();
            actions.append(h('button', { type: 'button', class: 'btn btn-sm', onClick: () => highlight(id) }, t('docs.showExisting')));
          } else if (err.status === 429 || err.status === 503) {
            setState('busy', err.retryAfter ? t('docs.busyRetry', { seconds: err.retryAfter }) : t('chat.busy'));
            actions.append(retryButton());
          } else {
            setState('error', errorText(err));
            actions.append(retryButton());
          }
        } finally {
          xhr = null;
        }
      },
      // follow shows the uploaded document's processing status (doc is
      // undefined once it left the list): data-state stays "done", the
      // upload itself succeeded; data-doc-status tells how ingestion goes.
      follow(doc) {
        const status = doc ? doc.status : 'gone';
        el.dataset.docStatus = status;
        if (status === 'pending' || status === 'running') {
          progress.removeAttribute('value'); // indeterminate: ingestion has no percentage
          stateText.textContent = t(`docs.upload.${status}`);
          return;
        }
        progress.value = 1;
        following.delete(item);
        if (status === 'ready') stateText.textContent = t('docs.upload.ready', { n: doc.chunkCount ?? 0 });
        else if (status === 'failed') stateText.textContent = doc.error ? t('docs.upload.failedWith', { error: doc.error }) : t('docs.upload.failed');
        else stateText.textContent = t('docs.upload.gone');
        stateText.title = stateText.textContent;
        finish();
      },
    };
    return item;
  }

  function updateClearButton() {
    clearFinished.hidden = ![...uploads.children].some((el) => el.dataset.finished === 'true');
  }

  function clearUploads() {
    for (const el of [...uploads.children]) {
      if (el.dataset.finished === 'true') el.remove();
    }
    updateClearButton();
    fileInput.focus();
  }

  function highlight(id) {
    const row = tbody.querySelector(`[data-doc-id="${CSS.escape(id)}"]`);
    if (!row) { toast(t('docs.notInList'), 'info'); return; }
    row.scrollIntoView({ block: 'center', behavior: 'smooth' });
    row.classList.remove('flash');
    void row.offsetWidth;
    row.classList.add('flash');
    row.querySelector('button')?.focus({ preventScroll: true });
  }

  // ---- list ----
  function statusBadge(d) {
    const cls = { ready: 'badge-ok', failed: 'badge-bad', running: 'badge-run', pending: 'badge-wait' }[d.status] ?? '';
    return h('span', { class: `badge ${cls}`, 'data-testid': 'doc-status', 'data-status': d.status },
      d.status === 'running' || d.status === 'pending' ? h('span', { class: 'spinner', 'aria-hidden': 'true' }) : null,
      t(`docs.status.${d.status}`, {}, d.status));
  }

  function render() {
    tbody.replaceChildren(...docs.map((d) => h('tr', { 'data-testid': 'doc-row', 'data-doc-id': d.id, 'data-name': d.name, 'data-status': d.status },
      h('th', { scope: 'row', class: 'wrap' }, d.name,
        d.ocr ? h('span', { class: 'badge badge-ocr', 'data-testid': 'doc-ocr', title: t('docs.ocrTitle') }, t('docs.ocr')) : null,
        d.status === 'failed' && d.error ? h('p', { class: 'doc-error', 'data-testid': 'doc-error', role: 'note' }, d.error) : null),
      h('td', {}, statusBadge(d)),
      h('td', { class: 'num' }, d.chunkCount ?? 0),
      h('td', { class: 'num muted' }, formatBytes(d.size)),
      h('td', { class: 'muted' }, formatTime(d.updatedAt || d.createdAt)),
      h('td', { class: 'actions' },
        rowAction('doc-chunks', t('docs.preview'), d.name, () => previewChunks(d), { disabled: d.status !== 'ready' }),
        !canEdit || d.kind === 'manual' ? null : rowAction('doc-reindex', t('docs.reindex'), d.name, () => reindex(d), { disabled: d.status === 'pending' || d.status === 'running' }),
        !canEdit ? null : rowAction('doc-delete', t('common.delete'), d.name, () => remove(d), { danger: true })))));
    if (docs.length === 0) tbody.append(emptyRow(6, t('docs.empty')));
    for (const item of [...following]) item.follow(docs.find((d) => d.id === item.docId));
    const busy = docs.some((d) => d.status === 'pending' || d.status === 'running');
    pollNote.textContent = busy ? t('docs.polling') : '';
  }

  async function load() {
    if (loading) { reloadAfter = true; return; }
    loading = true;
    reloadAfter = false;
    try {
      const items = await fetchDocs();
      if (destroyed) return;
      docs = items;
      render();
    } catch (err) {
      if (destroyed) return;
      if (err.status === 403) { ctx.forbidden(); return; }
      toast(errorText(err));
    } finally {
      loading = false;
    }
    if (reloadAfter) schedulePoll(0);
    else if (docs.some((d) => d.status === 'pending' || d.status === 'running')) schedulePoll(POLL_MS);
  }

  async function fetchDocs() {
    const items = [];
    let cursor = '';
    for (let page = 0; page < MAX_PAGES; page++) {
      const q = cursor ? `&cursor=${enc(cursor)}` : '';
      const res = await get(`/knowledge-bases/${enc(kbId)}/documents?limit=${PAGE_SIZE}${q}`);
      items.push(...(res?.items ?? []));
      cursor = res?.nextCursor;
      if (!cursor) break;
    }
    return items;
  }

  function schedulePoll(ms) {
    if (destroyed) return;
    clearTimeout(pollTimer);
    pollTimer = setTimeout(load, ms);
  }

  async function loadKb() {
    try {
      const kb = await get(`/knowledge-bases/${enc(kbId)}`);
      if (destroyed) return;
      heading.querySelector('h1').textContent = t('docs.titleOf', { name: kb.name });
      canEdit = kb.role === 'editor' || kb.role === 'manager';
      uploadCard.hidden = !canEdit;
      qaCard.hidden = !canEdit;
      render();
      subtitle.replaceChildren(kb.description || '', kb.description && kb.reembedding ? ' ' : '', reembedBadge(kb) ?? '');
      // The progress moves on its own; follow it until the switch.
      if (kb.reembedding) setTimeout(() => { if (!destroyed) loadKb(); }, 2000);
    } catch (err) {
      if (destroyed) return;
      if (err.status === 403) { ctx.forbidden(); return; }
      toast(errorText(err));
    }
  }

  // previewChunks lists a document's chunks; editors edit, disable,
  // enable, delete and add them and read and restore their revisions
  // (README "Curating chunks"). Each change answers once both search
  // backends serve it.
  async function previewChunks(d) {
    const list = h('ol', { class: 'chunk-list', 'data-testid': 'chunk-list' }, h('li', { class: 'muted' }, t('common.loading')));
    const addBox = !canEdit ? null : h('div', { class: 'chunk-add', 'data-testid': 'chunk-add' },
      h('textarea', { rows: 3, class: 'chunk-editor', 'data-testid': 'chunk-add-input', 'aria-label': t('curate.addLabel'), placeholder: t('curate.addHint') }),
      h('button', { type: 'button', class: 'btn btn-sm', 'data-testid': 'chunk-add-save', onClick: addChunk }, t('curate.add')));
    // The deletions an editor can undo (GET /documents/{id}/deleted-chunks):
    // each with the text it had, restored at its old place and section.
    const deleted = !canEdit ? null : h('ol', { class: 'chunk-list chunk-deleted-list', 'data-testid': 'chunk-deleted-list' });
    const deletedBox = !canEdit ? null : h('section', { class: 'chunk-deleted', 'data-testid': 'chunk-deleted', hidden: true },
      h('h3', { class: 'chunk-deleted-title', 'data-testid': 'chunk-deleted-title' }), deleted);
    modal(t('docs.chunksOf', { name: d.name }), h('div', {}, d.kind === 'manual' ? null : h('p', { class: 'muted' }, t('curate.rule')), addBox, list, deletedBox), 'chunk-dialog');

    // showHistory lists chunk id's revisions into el, each with a restore
    // button (not on a deletion, which has no state to go back to).
    async function showHistory(id, el) {
      el.hidden = false;
      try {
        const res = await get(`/chunks/${enc(id)}/revisions`);
        const revs = res?.items ?? [];
        const parsed = revs.length && revs[revs.length - 1].action !== 'create';
        el.replaceChildren(...revs.map((r) => h('li', { 'data-testid': 'chunk-revision', 'data-revision': r.revision, 'data-action': r.action },
          h('span', {}, `r${r.revision} ${t(`curate.action.${r.action}`, {}, r.action)} · ${r.actorName} · ${formatTime(r.createdAt)}`),
          r.contentAfter != null ? h('pre', { class: 'chunk-content' }, r.contentAfter) : null,
          r.action === 'delete' ? null : h('button', { type: 'button', class: 'btn btn-sm', 'data-testid': 'chunk-restore', onClick: () => restoreTo(id, r.revision) }, t('curate.restore')))),
        parsed ? h('li', {}, h('button', { type: 'button', class: 'btn btn-sm', 'data-testid': 'chunk-restore-original', onClick: () => restoreTo(id, 0) }, t('curate.restoreOriginal')))
          : revs.length ? null : h('li', { class: 'muted' }, t('curate.noHistory')));
      } catch (err) { el.replaceChildren(h('li', { class: 'form-error' }, errorText(err))); }
    }

    // restoreTo brings chunk id back to its state after revision n (0: as
    // parsed); a deleted chunk comes back into the list.
    async function restoreTo(id, n) {
      try {
        await post(`/chunks/${enc(id)}/revisions/${n}/restore`);
        toast(t('curate.saved'), 'info');
        await reloadChunks();
        load();
      } catch (err) { toast(errorText(err)); }
    }

    function deletedItem(r) {
      const history = h('ol', { class: 'chunk-history', 'data-testid': 'chunk-history', hidden: true });
      return h('li', { class: 'chunk-item chunk-deleted-item', 'data-testid': 'chunk-deleted-item', 'data-chunk-id': r.chunkId, 'data-revision': r.revision },
        h('div', { class: 'chunk-meta' },
          r.ordinal != null ? h('strong', {}, `#${r.ordinal}`) : null,
          r.section ? h('span', { class: 'chunk-section' }, r.section) : null,
          h('span', { class: 'badge' }, t('curate.deletedBy', { who: r.actorName || '—', when: formatTime(r.createdAt) }))),
        h('pre', { class: 'chunk-content', 'data-testid': 'chunk-content' }, r.contentBefore ?? ''),
        h('div', { class: 'chunk-actions' },
          h('button', { type: 'button', class: 'btn btn-sm btn-primary', 'data-testid': 'chunk-undelete', onClick: () => restoreTo(r.chunkId, r.revision - 1) }, t('curate.undelete')),
          h('button', { type: 'button', class: 'btn btn-sm', 'data-testid': 'chunk-history-button', onClick: () => showHistory(r.chunkId, history) }, t('curate.history'))),
        history);
    }

    async function addChunk() {
      const input = addBox.querySelector('textarea');
      try {
        await post(`/documents/${enc(d.id)}/chunks`, { content: input.value });
        input.value = '';
        toast(t('curate.saved'), 'info');
        await reloadChunks();
        load();
      } catch (err) { toast(errorText(err)); }
    }

    function chunkItem(c) {
      const content = h('pre', { class: 'chunk-content', 'data-testid': 'chunk-content' }, c.content);
      const history = h('ol', { class: 'chunk-history', 'data-testid': 'chunk-history', hidden: true });
      const change = async (body) => {
        try {
          await patch(`/chunks/${enc(c.id)}`, { ...body, revision: c.revision });
          toast(t('curate.saved'), 'info');
          await reloadChunks();
          load();
        } catch (err) { toast(errorText(err)); }
      };
      const edit = () => {
        const ta = h('textarea', { class: 'chunk-editor', rows: 6, 'data-testid': 'chunk-editor' });
        ta.value = c.content;
        const save = h('button', { type: 'button', class: 'btn btn-sm btn-primary', 'data-testid': 'chunk-save', onClick: () => change({ content: ta.value }) }, t('common.save'));
        content.replaceWith(h('div', { class: 'chunk-edit' }, ta, save));
        ta.focus();
      };
      const remove = async () => {
        if (!await confirmDialog(t('curate.deleteConfirm'), { danger: true })) return;
        try { await del(`/chunks/${enc(c.id)}`); await reloadChunks(); load(); } catch (err) { toast(errorText(err)); }
      };
      return h('li', { class: c.enabled === false ? 'chunk-item chunk-disabled' : 'chunk-item', 'data-testid': 'chunk-item', 'data-chunk-id': c.id, 'data-enabled': String(c.enabled !== false), 'data-revision': c.revision ?? 0 },
        h('div', { class: 'chunk-meta' },
          h('strong', {}, `#${c.ordinal}`),
          c.section ? h('span', { class: 'chunk-section' }, c.section) : null,
          h('span', { class: 'muted' }, t('docs.tokens', { n: c.tokenCount ?? 0 })),
          c.manual ? h('span', { class: 'badge' }, t('curate.manual')) : null,
          c.revision ? h('span', { class: 'badge' }, t('curate.edited', { n: c.revision })) : null,
          c.enabled === false ? h('span', { class: 'badge' }, t('curate.disabled')) : null),
        content,
        !canEdit ? null : h('div', { class: 'chunk-actions' },
          h('button', { type: 'button', class: 'btn btn-sm', 'data-testid': 'chunk-edit', onClick: edit }, t('curate.edit')),
          h('button', { type: 'button', class: 'btn btn-sm', 'data-testid': 'chunk-toggle', onClick: () => change({ enabled: c.enabled === false }) },
            c.enabled === false ? t('curate.enable') : t('curate.disable')),
          h('button', { type: 'button', class: 'btn btn-sm', 'data-testid': 'chunk-history-button', onClick: () => showHistory(c.id, history) }, t('curate.history')),
          h('button', { type: 'button', class: 'btn btn-sm btn-danger', 'data-testid': 'chunk-delete', onClick: remove }, t('common.delete'))),
        history);
    }

    async function reloadChunks() {
      try {
        const res = await get(`/documents/${enc(d.id)}/chunks?limit=500`);
        const items = res?.items ?? [];
        list.replaceChildren(...items.map(chunkItem));
        if (items.length === 0) list.append(h('li', { class: 'muted' }, t('docs.noChunks')));
        if (res?.nextCursor) list.append(h('li', { class: 'muted' }, t('docs.moreChunks')));
      } catch (err) {
        list.replaceChildren(h('li', { class: 'form-error', role: 'alert' }, errorText(err)));
      }
      if (!deleted) return;
      try {
        const gone = (await get(`/documents/${enc(d.id)}/deleted-chunks`))?.items ?? [];
        deleted.replaceChildren(...gone.map(deletedItem));
        deletedBox.querySelector('h3').textContent = t('curate.deletedTitle', { n: gone.length });
        deletedBox.hidden = gone.length === 0;
      } catch (err) {
        deletedBox.hidden = false;
        deleted.replaceChildren(h('li', { class: 'form-error', role: 'alert' }, errorText(err)));
      }
    }
    await reloadChunks();
  }

  // reindex rebuilds the chunks from the file, which discards the chunks
  // edited by hand: it asks first when there are any.
  async function reindex(d) {
    if (d.curatedChunks > 0 && !await confirmDialog(t('curate.reindexWarning', { n: d.curatedChunks }), { danger: true })) return;
    return act(() => post(`/documents/${enc(d.id)}/reindex`), load, t('docs.reindexStarted', { name: d.name }));
  }

  function remove(d) {
    return confirmDelete(t('docs.deleteConfirm', { name: d.name }), `/documents/${enc(d.id)}`, load);
  }

  loadKb();
  load();

  return {
    destroy() {
      destroyed = true;
      clearTimeout(pollTimer);
      for (const item of queue.splice(0)) item.el.remove();
      window.removeEventListener('dragover', blockDrop);
      window.removeEventListener('drop', blockDrop);
    },
  };
}
