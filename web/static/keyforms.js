// What the API-key and widget-key pages share: the knowledge-base picker of
// the create form, revoking a key, and the dialog that shows a new key once
// (the server keeps only its hash).
import { t } from './i18n.js';
import { h, toast, errorText, confirmDialog } from './dom.js';
import { get, del, enc } from './api.js';

// kbPicker is a fieldset of a checkbox per knowledge base; p prefixes the
// ids and test ids (apikey, widgetkey). names maps an id to its name once
// load has run.
export function kbPicker(p, legend, hint) {
  const list = h('div', { class: 'checks', 'data-testid': `${p}-kbs` });
  const picker = {
    fieldset: h('fieldset', { class: 'checks' }, h('legend', {}, legend), h('small', { class: 'hint' }, hint), list),
    names: new Map(),
    picked: () => [...list.querySelectorAll('input:checked')].map((b) => b.value),
    async load(gone) {
      try {
        const res = await get('/knowledge-bases?limit=200');
        if (gone()) return;
        const items = res?.items ?? [];
        picker.names = new Map(items.map((kb) => [kb.id, kb.name]));
        list.replaceChildren(...items.map((kb) => {
          const box = h('input', { type: 'checkbox', id: `${p}-kb-${kb.id}`, value: kb.id, 'data-testid': `${p}-kb`, 'data-kb-id': kb.id });
          return h('label', { for: box.id, class: 'check' }, box, ' ', kb.name);
        }));
      } catch (err) {
        toast(errorText(err));
      }
    },
  };
  return picker;
}

// revokeKey asks first, revokes key k and reloads the list; ns is the
// page's message namespace (apikeys, widgets).
export async function revokeKey(ns, k, reload) {
  if (!(await confirmDialog(t(`${ns}.revokeConfirm`, { name: k.name, prefix: k.prefix }), { okLabel: t(`${ns}.revoke`), danger: true }))) return;
  try {
    await del(`/api-keys/${enc(k.id)}`);
    toast(t(`${ns}.revoked`), 'info');
  } catch (err) {
    toast(errorText(err));
  }
  await reload();
}

// showOnce opens the dialog that shows text (in the control value) with a
// copy button; closing it drops the only copy the page has. p prefixes the
// test ids, ns the messages; body is what stands between title and buttons.
export function showOnce({ p, ns, title, text, value, body }) {
  const dlg = h('dialog', { class: 'dialog', 'data-testid': `${p}-dialog`, 'aria-labelledby': `${p}-dialog-title` });
  dlg.addEventListener('close', () => dlg.remove());
  const copy = h('button', { type: 'button', class: 'btn btn-primary', 'data-testid': `${p}-copy`, onClick: () => {
    const copied = navigator.clipboard ? navigator.clipboard.writeText(text) : Promise.reject(new Error('no clipboard'));
    copied.then(
      () => { copy.dataset.copied = 'true'; toast(t(`${ns}.copied`), 'info'); },
      () => { value.select(); toast(t(`${ns}.copyFailed`)); });
  } }, t(`${ns}.copy`));
  dlg.append(h('div', { class: 'dialog-body' },
    h('div', { class: 'dialog-head' }, h('h2', { id: `${p}-dialog-title` }, title)),
    ...body,
    h('div', { class: 'dialog-actions' },
      copy,
      h('button', { type: 'button', class: 'btn', 'data-testid': `${p}-dialog-close`, onClick: () => dlg.close() }, t(`${ns}.done`)))));
  document.body.append(dlg);
  dlg.showModal();
  value.select();
}
