// The group admin page: the groups knowledge bases are shared with, and the
// dialog of who is in each.
import { t } from './i18n.js';
import { h, promptDialog, field } from './dom.js';
import { post, patch, enc, ActionKey } from './api.js';
import { pageHeader, adminForm, createForm, rowAction, act, confirmDelete, numCol, listPage, dialogList } from './admin.js';

// mountGroups manages the groups knowledge bases are shared with: create,
// rename, delete, and who is in each.
export function mountGroups(root, ctx) {
  const name = h('input', { id: 'group-name', required: true, maxlength: ctx.limits.nameRunes, autocomplete: 'off', 'data-testid': 'group-name' });
  const description = h('input', { id: 'group-description', maxlength: ctx.limits.descriptionRunes, autocomplete: 'off', 'data-testid': 'group-description' });
  const form = createForm({
    name: 'group',
    title: t('groups.createTitle'),
    fields: [
      field(t('groups.name'), name),
      field(t('groups.description'), description)],
    path: '/groups',
    body: () => ({ name: name.value.trim(), description: description.value.trim() }),
    reload: () => load(),
  });

  async function rename(g) {
    const v = await promptDialog(t('groups.rename', { name: g.name }), g.name);
    if (!v || v.trim() === g.name) return;
    await act(() => patch(`/groups/${enc(g.id)}`, { name: v.trim() }), load, t('common.saved'));
  }

  function remove(g) {
    return confirmDelete(t('groups.deleteConfirm', { name: g.name }), `/groups/${enc(g.id)}`, load);
  }

  const { table, load, destroy } = listPage({
    columns: [t('groups.name'), t('groups.description'), numCol(t('groups.memberCount')), t('common.actions')],
    path: '/groups?limit=200',
    empty: t('groups.empty'),
    // A group the identity provider manages follows its groups claim:
    // its members are shown, nothing about it can be changed here.
    row: (g) => h('tr', { 'data-testid': 'group-row', 'data-id': g.id, 'data-name': g.name, 'data-managed': g.managedBy || '' },
      h('th', { scope: 'row' }, g.name,
        g.managedBy ? h('span', { class: 'badge', 'data-testid': 'group-managed', title: t('groups.managedHint') }, t('groups.managed')) : null),
      h('td', { class: 'wrap' }, g.description || '—'),
      h('td', { class: 'num' }, g.memberCount ?? 0),
      h('td', { class: 'actions' },
        rowAction('group-members', t('kb.members'), g.name, () => openGroupMembers(g, load)),
        g.managedBy ? null : rowAction('group-rename', t('common.edit'), g.name, () => rename(g)),
        g.managedBy ? null : rowAction('group-delete', t('common.delete'), g.name, () => remove(g), { danger: true }))),
  });
  root.append(h('div', { class: 'page' }, pageHeader(t('groups.title'), t('groups.subtitle')), form, table));

  load();
  return { destroy };
}

// openGroupMembers lists a group's users and adds or removes one by
// username; changed() refreshes the member counts behind the dialog.
function openGroupMembers(g, changed) {
  const username = h('input', { id: 'group-member-username', required: true, maxlength: 64, autocomplete: 'off', 'data-testid': 'group-member-username' });
  const addKey = new ActionKey(); // the Idempotency-Key of the form's submit
  const { form, errBox } = adminForm({
    name: 'group-member',
    label: t('groups.addMember'),
    below: [field(t('users.username'), username)],
    submitText: t('groups.addMember'),
    formClass: 'member-form',
    save: async () => {
      await post(`/groups/${enc(g.id)}/members`, { username: username.value.trim() }, { key: addKey });
      username.value = '';
      await load();
      changed();
    },
  });
  const managed = Boolean(g.managedBy);

  const { load, remove } = dialogList({
    title: t('groups.membersOf', { name: g.name }),
    testid: 'group-members-dialog',
    columns: [t('users.username'), t('common.actions')],
    after: managed ? h('p', { class: 'muted', 'data-testid': 'group-managed-note' }, t('groups.managedHint')) : form,
    path: `/groups/${enc(g.id)}/members`,
    empty: t('members.empty'),
    errBox,
    row: (u) => h('tr', { 'data-testid': 'group-member-row', 'data-username': u.username },
      h('th', { scope: 'row' }, u.username),
      h('td', { class: 'actions' },
        managed ? null : rowAction(null, t('members.remove'), u.username,
          () => remove(`/groups/${enc(g.id)}/members/${enc(u.id)}`, changed), { danger: true }))),
  });
  load();
}
