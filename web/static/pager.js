// A cursor-paged admin list shown in a table body: load(false) starts over
// from the first page, the "load more" button appends the next one. An
// answer to an older request than the newest is dropped, and so is any
// answer after the page was left.
import { clear } from './dom.js';
import { get } from './api.js';
import { showFormError, emptyRow } from './admin.js';

// pagedList: path is the list's API path; query() its filters (a
// URLSearchParams, the cursor is added here); row(item) a table row;
// empty the [columns, text] of the row shown when nothing matched.
export function pagedList({ path, query, tbody, more, errBox, row, empty, ctx }) {
  let cursor = null;
  let destroyed = false;
  let generation = 0; // a newer search makes older answers stale

  async function load(append) {
    const mine = ++generation;
    if (!append) cursor = null;
    more.disabled = true;
    try {
      const q = query();
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
