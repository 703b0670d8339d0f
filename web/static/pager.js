// A cursor-paged admin list shown in a table body: load(false) starts over
// from the first page, the "load more" button appends the next one. An
// answer to an older request than the newest is dropped, and so is any
// answer after the page was left. filteredList puts one under a form of
// filters (audit.js, feedback.js).
import { t } from './i18n.js';
import { h, clear } from './dom.js';
import { get } from './api.js';
import { formError, showFormError, dataTable, emptyRow } from './admin.js';

// filteredList is a paged list under a form of filters, for a page to show
// under its header: form (fields, then actions and the Search button),
// table (under columns) and more (the row of the "load more" button).
// Search loads the first page, as list.load(false) does; list is the
// pagedList of path, query, row, empty and ctx. name prefixes the test ids:
// <name>-filters, -search, -table, -load-more.
export function filteredList({ name, fields, actions = [], columns, path, query, row, empty, ctx }) {
  const errBox = formError();
  const form = h('form', { class: 'card form-card', 'data-testid': `${name}-filters`, 'aria-label': t('audit.filters') },
    h('div', { class: 'form-grid' }, fields),
    errBox,
    h('div', { class: 'form-actions' }, actions,
      h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': `${name}-search` }, t('audit.search'))));
  const tbody = h('tbody', { 'data-testid': `${name}-table` });
  const button = h('button', { type: 'button', class: 'btn', hidden: true, 'data-testid': `${name}-load-more` }, t('chat.loadMore'));
  const list = pagedList({ path, query, tbody, more: button, errBox, row, empty: [columns.length, empty], ctx });
  form.addEventListener('submit', (e) => { e.preventDefault(); list.load(false); });
  return { form, table: dataTable(columns, tbody), more: h('div', { class: 'form-actions' }, button), list };
}

// PAGE is how many items a page of the list asks for.
const PAGE = 50;

// pagedList: path is the list's API path; query() its filters (a
// URLSearchParams; the page size and the cursor are added here); row(item)
// a table row; empty the [columns, text] of the row shown when nothing
// matched.
function pagedList({ path, query, tbody, more, errBox, row, empty, ctx }) {
  let cursor = null;
  let destroyed = false;
  let generation = 0; // a newer search makes older answers stale

  async function load(append) {
    const mine = ++generation;
    if (!append) cursor = null;
    more.disabled = true;
    try {
      const q = query();
      q.set('limit', String(PAGE));
      if (cursor) q.set('cursor', cursor);
      const page = await get(`${path}?${q}`);
      if (destroyed || mine !== generation) return;
      errBox.hidden = true;
      if (!append) clear(tbody);
      for (const item of page.items) tbody.append(row(item));
      if (!tbody.firstChild) tbody.append(emptyRow(...empty));
      cursor = page.nextCursor;
      more.hidden = !cursor;
    } catch (err) {
      if (destroyed || mine !== generation) return;
      if (err.status === 403) { ctx.forbidden(); return; }
      showFormError(errBox, err);
    } finally {
      more.disabled = false;
    }
  }

  more.addEventListener('click', () => load(true));
  return {
    load,
    destroyed: () => destroyed,
    destroy() { destroyed = true; },
  };
}
