// The intent tree editor: the tree on one side, the selected node's form on
// the other. Writes send the full node (PUT replaces it), and the tree is
// reloaded after each write so paths and order come from the server.
import { t } from './i18n.js';
import { h, toast, errorText, confirmDialog, field } from './dom.js';
import { get, post, put, del, enc, ActionKey } from './api.js';
import { pageHeader, formError, showFormError } from './admin.js';

const MAX_DEPTH = 3;

export function mountIntents(root, ctx) {
  let roots = [];
  let kbs = [];
  let selected = null; // the node being edited, or null for a new one
  let newParentId = null; // parent of the node being created
  let destroyed = false;
  // touched: the admin has typed or chosen something since the form was
  // last filled. The first load must not wipe such input (the form is usable
  // before the tree and knowledge bases arrive).
  let touched = false;

  const treeBox = h('div', { class: 'intent-tree', 'data-testid': 'intent-tree', role: 'navigation', 'aria-label': t('intents.tree') });
  const addRoot = h('button', { type: 'button', class: 'btn btn-sm btn-primary', 'data-testid': 'intent-add-root', onClick: () => startCreate(null) }, '+ ' + t('intents.addRoot'));

  const parent = h('select', { id: 'intent-parent', 'data-testid': 'intent-parent' });
  const code = h('input', { id: 'intent-code', required: true, maxlength: 64, autocomplete: 'off', 'data-testid': 'intent-code' });
  const name = h('input', { id: 'intent-name', required: true, maxlength: ctx.limits.nameRunes, autocomplete: 'off', 'data-testid': 'intent-name' });
  const description = h('textarea', { id: 'intent-description', rows: 2, maxlength: ctx.limits.descriptionRunes, 'data-testid': 'intent-description' });
  const examples = h('textarea', { id: 'intent-examples', rows: 3, 'data-testid': 'intent-examples' });
  const kind = h('select', { id: 'intent-kind', 'data-testid': 'intent-kind' },
    h('option', { value: 'kb' }, t('intents.kind.kb')),
    h('option', { value: 'system' }, t('intents.kind.system')));
  const kbBox = h('fieldset', { class: 'kb-options inline' }, h('legend', {}, t('intents.kbs')));
  const prompt = h('textarea', { id: 'intent-prompt', rows: 3, 'data-testid': 'intent-prompt' });
  const enabled = h('input', { id: 'intent-enabled', type: 'checkbox', checked: true, 'data-testid': 'intent-enabled' });
  const sort = h('input', { id: 'intent-sort', type: 'number', step: 1, value: '0', 'data-testid': 'intent-sort' });
  const pathText = h('p', { class: 'muted intent-path', 'data-testid': 'intent-path' });
  const formTitle = h('h2', {}, t('intents.createTitle'));
  const errBox = formError();
  const save = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'intent-save' }, t('common.save'));
  const remove = h('button', { type: 'button', class: 'btn btn-danger-ghost', 'data-testid': 'intent-delete', hidden: true, onClick: onDelete }, t('common.delete'));
  const addChild = h('button', { type: 'button', class: 'btn', 'data-testid': 'intent-add-child', hidden: true, onClick: () => selected && startCreate(selected.id) }, '+ ' + t('intents.addChild'));
  const form = h('form', { class: 'card form-card intent-form', 'data-testid': 'intent-form', 'aria-label': t('intents.formLabel') },
    formTitle,
    pathText,
    h('div', { class: 'form-grid' },
      field(t('intents.parent'), parent),
      field(t('intents.code'), code, t('intents.codeHint')),
      field(t('intents.name'), name),
      field(t('intents.kind'), kind),
      field(t('intents.sort'), sort),
      h('div', { class: 'field field-check' }, h('label', { class: 'check', for: 'intent-enabled' }, enabled, h('span', {}, t('common.enabled'))))),
    field(t('intents.description'), description),
    field(t('intents.examples'), examples, t('intents.examplesHint')),
    kbBox,
    field(t('intents.prompt'), prompt, t('intents.promptHint')),
    errBox,
    h('div', { class: 'form-actions' }, remove, h('span', { class: 'spacer' }), addChild, save));

  kind.addEventListener('change', () => { kbBox.hidden = kind.value !== 'kb'; });
  form.addEventListener('input', () => { touched = true; });
  form.addEventListener('change', () => { touched = true; });

  root.append(h('div', { class: 'page' },
    pageHeader(t('intents.title'), t('intents.subtitle')),
    h('div', { class: 'split' },
      h('section', { class: 'card tree-card', 'aria-label': t('intents.tree') },
        h('div', { class: 'section-head' }, h('h2', {}, t('intents.tree')), addRoot),
        treeBox),
      form)));

  // ---- tree helpers ----
  function* walk(nodes, depth = 1) {
    for (const n of nodes ?? []) {
      yield [n, depth];
      yield* walk(n.children, depth + 1);
    }
  }

  function find(id) {
    for (const [n] of walk(roots)) if (n.id === id) return n;
    return null;
  }

  function depthOf(id) {
    for (const [n, d] of walk(roots)) if (n.id === id) return d;
    return 0;
  }

  function descendantIds(node) {
    const ids = new Set();
    for (const [n] of walk(node?.children)) ids.add(n.id);
    return ids;
  }

  function renderTree() {
    const list = (nodes, depth) => h('ul', { class: 'tree-level', role: depth === 1 ? 'list' : null },
      nodes.map((n) => h('li', { class: 'tree-item' },
        h('div', { class: 'tree-row' + (selected?.id === n.id ? ' selected' : '') },
          h('button', {
            type: 'button', class: 'tree-node', 'data-testid': 'intent-node', 'data-id': n.id, 'data-code': n.code,
            'aria-current': selected?.id === n.id ? 'true' : null, onClick: () => select(n.id),
          },
          h('span', { class: 'tree-name' }, n.name),
          h('code', { class: 'tree-code' }, n.code),
          h('span', { class: `badge badge-kind-${n.kind}` }, t(`intents.kind.${n.kind}`, {}, n.kind)),
          n.enabled ? null : h('span', { class: 'badge' }, t('common.disabled'))),
          depth < MAX_DEPTH ? h('button', {
            type: 'button', class: 'icon-btn', 'aria-label': `${t('intents.addChild')}: ${n.name}`, title: t('intents.addChild'),
            onClick: () => startCreate(n.id),
          }, '+') : null),
        n.children?.length ? list(n.children, depth + 1) : null)));
    treeBox.replaceChildren(roots.length ? list(roots, 1) : h('p', { class: 'muted' }, t('intents.empty')));
  }

  function renderParentOptions(currentParentId, self) {
    const exclude = self ? descendantIds(self) : new Set();
    if (self) exclude.add(self.id);
    parent.replaceChildren(h('option', { value: '' }, t('intents.rootOption')));
    for (const [n, d] of walk(roots)) {
      if (exclude.has(n.id) || d >= MAX_DEPTH) continue;
      parent.append(h('option', { value: n.id, selected: n.id === currentParentId }, `${'— '.repeat(d - 1)}${n.name} (${n.code})`));
    }
    parent.value = currentParentId ?? '';
  }

  function renderKbOptions(checkedIds) {
    const checked = new Set(checkedIds ?? []);
    kbBox.replaceChildren(h('legend', {}, t('intents.kbs')));
    if (kbs.length === 0) kbBox.append(h('p', { class: 'muted' }, t('chat.kbNone')));
    for (const kb of kbs) {
      const id = `intent-kb-${kb.id}`;
      kbBox.append(h('label', { class: 'check', for: id },
        h('input', { type: 'checkbox', id, value: kb.id, 'data-testid': 'intent-kb-option', 'data-kb-id': kb.id, checked: checked.has(kb.id) }),
        h('span', {}, kb.name)));
    }
    kbBox.hidden = kind.value !== 'kb';
  }

  // ---- form ----
  function fill(n, parentId) {
    touched = false;
    errBox.hidden = true;
    code.value = n?.code ?? '';
    name.value = n?.name ?? '';
    description.value = n?.description ?? '';
    examples.value = (n?.examples ?? []).join('\n');
    kind.value = n?.kind ?? 'kb';
    prompt.value = n?.promptTemplate ?? '';
    enabled.checked = n ? Boolean(n.enabled) : true;
    sort.value = String(n?.sort ?? 0);
    renderParentOptions(parentId, n);
    renderKbOptions(n?.knowledgeBaseIds);
    pathText.textContent = n?.path ? `${t('intents.path')}: ${n.path}` : '';
    pathText.hidden = !n?.path;
    remove.hidden = !n;
    addChild.hidden = !n || depthOf(n.id) >= MAX_DEPTH;
  }

  function select(id) {
    const n = find(id);
    if (!n) return;
    selected = n;
    formTitle.textContent = t('intents.editTitle', { name: n.name });
    fill(n, n.parentId || null);
    renderTree();
  }

  function startCreate(parentId) {
    selected = null;
    newParentId = parentId;
    const p = parentId ? find(parentId) : null;
    formTitle.textContent = p ? t('intents.createChildTitle', { name: p.name }) : t('intents.createTitle');
    fill(null, parentId);
    renderTree();
    code.focus();
  }

  function bodyOf() {
    return {
      parentId: parent.value || null,
      code: code.value.trim(),
      name: name.value.trim(),
      description: description.value.trim(),
      examples: examples.value.split('\n').map((x) => x.trim()).filter(Boolean),
      kind: kind.value,
      knowledgeBaseIds: kind.value === 'kb' ? [...kbBox.querySelectorAll('input:checked')].map((c) => c.value) : [],
      promptTemplate: prompt.value,
      enabled: enabled.checked,
      sort: Number.parseInt(sort.value, 10) || 0,
    };
  }

  const createKey = new ActionKey(); // the Idempotency-Key of a create
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    errBox.hidden = true;
    save.disabled = true;
    try {
      const body = bodyOf();
      let saved;
      if (selected) saved = await put(`/admin/intents/${enc(selected.id)}`, body);
      else saved = await post('/admin/intents', body, { key: createKey });
      toast(selected ? t('common.saved') : t('common.created'), 'info');
      await load();
      const id = saved?.id ?? selected?.id;
      if (id && find(id)) select(id);
      else startCreate(newParentId);
    } catch (err) {
      showFormError(errBox, err);
    } finally {
      save.disabled = false;
    }
  });

  async function onDelete() {
    if (!selected) return;
    const n = selected;
    const hasChildren = (n.children?.length ?? 0) > 0;
    const msg = hasChildren
      ? t('intents.deleteCascadeConfirm', { name: n.name, count: descendantIds(n).size })
      : t('intents.deleteConfirm', { name: n.name });
    if (!(await confirmDialog(msg, { okLabel: t('common.delete'), danger: true }))) return;
    try {
      await del(`/admin/intents/${enc(n.id)}${hasChildren ? '?cascade=true' : ''}`);
      toast(t('common.deleted'), 'info');
      await load();
      startCreate(null);
    } catch (err) {
      showFormError(errBox, err);
    }
  }

  async function load() {
    try {
      const res = await get('/admin/intents');
      if (destroyed) return;
      roots = res?.items ?? [];
      if (selected) selected = find(selected.id);
      renderTree();
    } catch (err) {
      if (destroyed) return;
      if (err.status === 403) { ctx.forbidden(); return; }
      toast(errorText(err));
    }
  }

  async function loadKbs() {
    try {
      const res = await get('/knowledge-bases?limit=200');
      kbs = res?.items ?? [];
    } catch (err) {
      toast(errorText(err));
    }
  }

  fill(null, null);
  Promise.all([load(), loadKbs()]).then(() => {
    if (destroyed) return;
    if (touched) {
      // Keep what was typed; only add the choices that needed the data.
      const checked = [...kbBox.querySelectorAll('input:checked')].map((c) => c.value);
      renderParentOptions(parent.value || newParentId, selected);
      renderKbOptions(checked);
      form.dataset.ready = 'true';
      return;
    }
    if (selected) select(selected.id);
    else fill(null, newParentId);
    form.dataset.ready = 'true';
  });

  return { destroy() { destroyed = true; } };
}
