// Ragent web UI: entry module, hash router, shell and login.
//
// Stable hooks for browser tests (data-testid unless noted; ids are on form
// controls so labels can point at them):
//   shell:    app, main-nav, nav-chat, nav-kb, nav-intents, nav-terms, nav-users, nav-groups,
//             nav-limiter, nav-audit, lang-switch, current-user, account-button,
//             logout-button, toasts, toast, forbidden (403 view), not-found
//   account:  account-dialog, account-close, account-password-form,
//             account-old-password (#account-old-password), account-new-password
//             (#account-new-password), account-confirm-password
//             (#account-confirm-password), account-password-submit,
//             account-error, account-logout-all
//   dialogs:  confirm-dialog, confirm-ok, confirm-cancel, prompt-dialog,
//             prompt-input, prompt-ok, prompt-cancel, modal, modal-close
//   login:    login-form, login-username (#login-username), login-password
//             (#login-password), login-submit, login-error
//   chat:     conversation-list, conversation-item (data-id, aria-current),
//             conversation-title, conv-rename, conv-delete, conv-load-more,
//             new-chat-button, conv-drawer-toggle, chat-title, message-list,
//             user-message, assistant-message (data-status = streaming |
//             completed | rejected | cancelled | failed, data-message-id),
//             pending-indicator, queue-indicator (data-position, data-queued),
//             thinking (<details>), answer, cite (data-cite=n), sources-panel,
//             source-item (data-index, data-document-id), message-notice
//             (data-kind), retry-button, composer, chat-input (#chat-input),
//             deep-thinking-toggle (#deep-thinking), kb-filter (<details>),
//             kb-filter-option (data-kb-id), send-button, stop-button
//   kb:       kb-form, kb-name, kb-description, kb-chunk-size, kb-chunk-overlap,
//             kb-visibility (#kb-visibility), kb-submit, kb-cancel,
//             kb-row (data-kb-id, data-name, data-visibility, data-role),
//             kb-docs-link, kb-edit, kb-delete, kb-members
//   members:  members-dialog, member-row (data-kind, data-name, data-role),
//             member-remove, member-form, member-kind (#member-kind),
//             member-name (#member-name), member-role (#member-role),
//             member-submit, member-error
//   docs:     upload-dropzone, upload-input (#upload-input, type=file multiple),
//             upload-item (data-state = waiting | uploading | done | duplicate |
//             busy | error, data-name; once done, data-doc-status = pending |
//             running | ready | failed | gone follows the document),
//             upload-progress, upload-retry, doc-table,
//             doc-row (data-doc-id, data-name, data-status), doc-status,
//             doc-error, doc-chunks, doc-reindex, doc-delete, chunk-list,
//             chunk-item, chunk-deleted (the deletions: chunk-deleted-item
//             with data-chunk-id, chunk-undelete, chunk-history-button)
//   intents:  intent-tree, intent-node (data-id, data-code), intent-add-root,
//             intent-add-child, intent-form, intent-parent, intent-code,
//             intent-name, intent-description, intent-examples, intent-kind,
//             intent-kb-option (data-kb-id), intent-prompt, intent-enabled,
//             intent-sort, intent-save, intent-delete, intent-path
//   terms:    term-form, term-source, term-target, term-priority, term-enabled,
//             term-submit, term-cancel, term-row (data-id, data-source),
//             term-edit, term-delete, term-toggle
//   users:    user-form, user-username, user-password, user-role, user-submit,
//             user-row (data-id, data-username), user-role-select,
//             user-disable, user-password-reset, user-delete
//   groups:   nav-groups, group-form, group-name (#group-name), group-description,
//             group-submit, group-row (data-id, data-name), group-members,
//             group-rename, group-delete, group-members-dialog,
//             group-member-username (#group-member-username), group-member-submit,
//             group-member-row (data-username)
//   limiter:  limiter-panel, limiter-permits, limiter-max, limiter-queue,
//             limiter-oldest, limiter-updated
//   audit:    audit-filters, audit-action (#audit-action), audit-result,
//             audit-actor, audit-target, audit-since, audit-until, audit-search,
//             audit-reset, audit-table, audit-row (data-action, data-result,
//             data-request-id), audit-load-more
//   usage:    nav-usage, usage-filters, usage-from (#usage-from), usage-to,
//             usage-apply, usage-chart, usage-bar (data-day, data-tokens),
//             usage-top-users, usage-user-row (data-name), usage-top-keys,
//             usage-key-row (data-name), quota-form, quota-subject, quota-subject-id,
//             quota-daily-tokens, quota-monthly-tokens, quota-daily-requests,
//             quota-monthly-requests, quota-submit, quota-table, quota-row
//             (data-subject, data-subject-id), quota-delete; in the account
//             dialog account-usage (data-tokens, data-requests)
//   apikeys:  nav-apikeys, apikey-form, apikey-name (#apikey-name), apikey-scope
//             (data-scope), apikey-kbs, apikey-kb (data-kb-id), apikey-expires,
//             apikey-submit, apikey-table, apikey-row (data-id, data-name),
//             apikey-revoke, apikey-dialog, apikey-value, apikey-copy,
//             apikey-dialog-close
//   widgets:  nav-widgets, widgetkey-form, widgetkey-name (#widgetkey-name),
//             widgetkey-origins, widgetkey-origin-rate, widgetkey-visitor-rate,
//             widgetkey-kbs, widgetkey-kb (data-kb-id), widgetkey-submit,
//             widgetkey-table, widgetkey-row (data-id, data-name),
//             widgetkey-row-origins, widgetkey-revoke, widgetkey-dialog,
//             widgetkey-snippet, widgetkey-copy (data-copied once copied),
//             widgetkey-dialog-close
import { t, getLang, setLang } from './i18n.js';
import { h, clear, toast, errorText } from './dom.js';
import { get, post, ApiError } from './api.js';
import { mountChat } from './chat.js';
import { mountKnowledgeBases } from './knowledgebases.js';
import { mountTerms } from './terms.js';
import { mountUsers } from './users.js';
import { mountGroups } from './groups.js';
import { mountLimiter } from './limiter.js';
import { mountDocuments } from './documents.js';
import { mountIntents } from './intents.js';
import { mountAudit } from './audit.js';
import { mountAPIKeys } from './apikeys.js';
import { mountUsage } from './usage.js';
import { openAccount } from './account.js';
import { mountFeedback } from './feedback.js';
import { mountWidgets } from './widgets.js';

// Each route names a page key (pages with the same key update in place
// instead of remounting), whether it needs an admin, and its mount function.
const routes = [
  { pattern: /^\/chat(?:\/([^/]+))?$/, key: 'chat', mount: mountChat, params: (m) => ({ id: m[1] ? decodeURIComponent(m[1]) : null }) },
  { pattern: /^\/admin\/kb$/, key: 'kb', curate: true, mount: mountKnowledgeBases },
  { pattern: /^\/admin\/docs\/([^/]+)$/, key: 'docs', curate: true, mount: mountDocuments, params: (m) => ({ kbId: decodeURIComponent(m[1]) }) },
  { pattern: /^\/admin\/intents$/, key: 'intents', admin: true, mount: mountIntents },
  { pattern: /^\/admin\/terms$/, key: 'terms', admin: true, mount: mountTerms },
  { pattern: /^\/admin\/users$/, key: 'users', admin: true, mount: mountUsers },
  { pattern: /^\/admin\/groups$/, key: 'groups', admin: true, mount: mountGroups },
  { pattern: /^\/admin\/limiter$/, key: 'limiter', admin: true, mount: mountLimiter },
  { pattern: /^\/admin\/audit$/, key: 'audit', admin: true, mount: mountAudit },
  { pattern: /^\/admin\/feedback$/, key: 'feedback', admin: true, mount: mountFeedback },
  { pattern: /^\/admin\/usage$/, key: 'usage', admin: true, mount: mountUsage },
  { pattern: /^\/admin\/widgets$/, key: 'widgets', admin: true, mount: mountWidgets },
  { pattern: /^\/api-keys$/, key: 'apikeys', mount: mountAPIKeys },
];

const navItems = [
  { href: '#/chat', key: 'chat', label: 'nav.chat', testid: 'nav-chat' },
  { href: '#/admin/kb', key: 'kb', label: 'nav.kb', testid: 'nav-kb', curate: true, also: ['docs'] },
  { href: '#/admin/intents', key: 'intents', label: 'nav.intents', testid: 'nav-intents', admin: true },
  { href: '#/admin/terms', key: 'terms', label: 'nav.terms', testid: 'nav-terms', admin: true },
  { href: '#/admin/users', key: 'users', label: 'nav.users', testid: 'nav-users', admin: true },
  { href: '#/admin/groups', key: 'groups', label: 'nav.groups', testid: 'nav-groups', admin: true },
  { href: '#/admin/limiter', key: 'limiter', label: 'nav.limiter', testid: 'nav-limiter', admin: true },
  { href: '#/admin/audit', key: 'audit', label: 'nav.audit', testid: 'nav-audit', admin: true },
  { href: '#/admin/feedback', key: 'feedback', label: 'nav.feedback', testid: 'nav-feedback', admin: true },
  { href: '#/admin/usage', key: 'usage', label: 'nav.usage', testid: 'nav-usage', admin: true },
  { href: '#/admin/widgets', key: 'widgets', label: 'nav.widgets', testid: 'nav-widgets', admin: true },
  { href: '#/api-keys', key: 'apikeys', label: 'nav.apikeys', testid: 'nav-apikeys' },
];

const state = {
  user: null,
  page: null, // { key, instance }
  busy: false, // a chat answer is streaming; the language switch waits
  shell: null,
  curator: false, // editor or manager of some knowledge base
  limits: {}, // the server's input limits (GET /limits), for form maxlengths
};

const appRoot = document.getElementById('app');

function currentPath() {
  const p = location.hash.replace(/^#/, '');
  return p.startsWith('/') ? p : '/';
}

function isAdmin() {
  return state.user?.role === 'admin';
}

// canCurate: admins, and users who edit or manage some knowledge base, get
// the knowledge-base and document pages (the server checks each action).
function canCurate() {
  return isAdmin() || state.curator;
}

// loadLimits fetches the input limits the server enforces, so forms check
// the same numbers; without them a form leaves the check to the server.
async function loadLimits() {
  try {
    state.limits = (await get('/limits')) ?? {};
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) toast(errorText(err));
  }
}

async function refreshCurator() {
  state.curator = false;
  if (!state.user || isAdmin()) return;
  try {
    const res = await get('/knowledge-bases?limit=200');
    state.curator = (res?.items ?? []).some((kb) => kb.role === 'editor' || kb.role === 'manager');
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) toast(errorText(err));
  }
}

function destroyPage() {
  try {
    state.page?.instance?.destroy?.();
  } finally {
    state.page = null;
  }
}

function setBusy(busy) {
  state.busy = busy;
  const btn = document.querySelector('[data-testid=lang-switch]');
  if (btn) {
    btn.disabled = busy;
    btn.title = busy ? t('shell.langBusy') : '';
  }
}

async function route() {
  const path = currentPath();
  if (!state.user) {
    if (path !== '/login') {
      sessionStorage.setItem('ragent.returnTo', location.hash);
      location.replace('#/login');
      return;
    }
    destroyPage();
    renderLogin();
    return;
  }
  if (path === '/login' || path === '/') {
    location.replace('#/chat');
    return;
  }
  const shell = ensureShell();
  let match = null;
  let r = null;
  for (const candidate of routes) {
    match = path.match(candidate.pattern);
    if (match) { r = candidate; break; }
  }
  highlightNav(r?.key);
  if (!r) {
    destroyPage();
    clear(shell.view).append(h('section', { class: 'empty-page', 'data-testid': 'not-found' },
      h('h1', {}, '404'), h('p', {}, t('shell.notFound')), h('a', { href: '#/chat', class: 'btn' }, t('shell.backToChat'))));
    return;
  }
  if ((r.admin && !isAdmin()) || (r.curate && !canCurate())) {
    destroyPage();
    renderForbidden(shell.view);
    return;
  }
  const params = r.params ? r.params(match) : {};
  if (state.page?.key === r.key && state.page.instance?.update) {
    state.page.instance.update(params);
    return;
  }
  destroyPage();
  clear(shell.view);
  const ctx = { user: state.user, limits: state.limits, params, setBusy, forbidden: () => renderForbidden(shell.view) };
  state.page = { key: r.key, instance: r.mount(shell.view, ctx) ?? {} };
}

function renderForbidden(view) {
  destroyPage();
  clear(view).append(h('section', { class: 'empty-page', 'data-testid': 'forbidden', role: 'alert' },
    h('h1', {}, '403'), h('p', {}, t('shell.forbidden')), h('a', { href: '#/chat', class: 'btn' }, t('shell.backToChat'))));
}

function highlightNav(key) {
  for (const a of document.querySelectorAll('.main-nav a')) {
    const keys = [a.dataset.key, ...(a.dataset.also ? a.dataset.also.split(',') : [])];
    if (keys.includes(key)) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

function langButton() {
  return h('button', {
    type: 'button', class: 'btn btn-ghost lang-switch', 'data-testid': 'lang-switch',
    lang: getLang() === 'zh' ? 'en' : 'zh-CN',
    'aria-label': t('shell.switchLang'),
    disabled: state.busy,
    onClick: () => {
      if (state.busy) return;
      setLang(getLang() === 'zh' ? 'en' : 'zh');
      rerender();
    },
  }, getLang() === 'zh' ? 'English' : '中文');
}

// rerender rebuilds everything in the new language.
function rerender() {
  destroyPage();
  state.shell = null;
  route();
}

function ensureShell() {
  if (state.shell && appRoot.contains(state.shell.view)) return state.shell;
  const view = h('main', { id: 'view', class: 'view', tabindex: '-1' });
  const nav = h('nav', { class: 'main-nav', 'aria-label': t('nav.label'), 'data-testid': 'main-nav' },
    navItems.filter((n) => (!n.admin || isAdmin()) && (!n.curate || canCurate())).map((n) =>
      h('a', { href: n.href, 'data-key': n.key, 'data-also': (n.also ?? []).join(','), 'data-testid': n.testid }, t(n.label))));
  const user = state.user;
  const header = h('header', { class: 'topbar' },
    h('a', { class: 'brand', href: '#/chat', 'aria-label': 'Ragent' }, h('span', { class: 'brand-mark', 'aria-hidden': 'true' }, 'R'), h('span', { class: 'brand-name' }, 'Ragent')),
    nav,
    h('div', { class: 'topbar-right' },
      langButton(),
      h('span', { class: 'user-badge', 'data-testid': 'current-user', title: user.username },
        h('span', { class: 'user-name' }, user.username),
        h('span', { class: `role role-${user.role}` }, t(`role.${user.role}`, {}, user.role))),
      h('button', { type: 'button', class: 'btn btn-ghost', 'data-testid': 'account-button', 'aria-haspopup': 'dialog', onClick: () => openAccount(accountShell) }, t('shell.account')),
      h('button', { type: 'button', class: 'btn btn-ghost', 'data-testid': 'logout-button', onClick: logout }, t('shell.logout'))));
  trackTopbarHeight(header);
  clear(appRoot).append(
    h('a', { class: 'skip-link', href: '#view', onClick: (e) => { e.preventDefault(); view.focus(); } }, t('shell.skip')),
    header,
    view);
  state.shell = { view };
  return state.shell;
}

// trackTopbarHeight keeps --topbar-h equal to the bar's real height: the
// nav wraps onto more rows on phones and with longer English labels, and
// the chat drawer and the toasts sit right under the bar.
let topbarObserver = null;
function trackTopbarHeight(header) {
  topbarObserver?.disconnect();
  topbarObserver = new ResizeObserver(() => {
    if (!header.isConnected) return;
    document.documentElement.style.setProperty('--topbar-h', `${header.offsetHeight}px`);
  });
  topbarObserver.observe(header);
}

async function logout() {
  try {
    // A single sign-on session ends at the identity provider too
    // (RP-initiated logout): the answer names its logout page, which
    // sends the browser back here afterwards.
    const res = await post('/auth/logout');
    if (res?.logoutUrl) {
      destroyPage();
      state.user = null;
      location.assign(res.logoutUrl);
      return;
    }
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) toast(errorText(err));
  }
  signedOut();
}

function signedOut() {
  destroyPage();
  state.user = null;
  state.shell = null;
  location.hash = '#/login';
}

// accountShell is what the account dialog (account.js) may do to the shell.
const accountShell = {
  user: () => state.user,
  setUser: (user) => { state.user = user; },
  signedOut,
};

function renderLogin() {
  state.shell = null;
  const username = h('input', { id: 'login-username', name: 'username', autocomplete: 'username', required: true, 'data-testid': 'login-username' });
  const password = h('input', { id: 'login-password', name: 'password', type: 'password', autocomplete: 'current-password', required: true, 'data-testid': 'login-password' });
  const errorBox = h('p', { class: 'form-error', role: 'alert', 'data-testid': 'login-error', hidden: true });
  const submit = h('button', { type: 'submit', class: 'btn btn-primary btn-block', 'data-testid': 'login-submit' }, t('login.submit'));
  const form = h('form', { class: 'login-card', 'data-testid': 'login-form', 'aria-labelledby': 'login-title' },
    h('div', { class: 'login-head' },
      h('span', { class: 'brand-mark', 'aria-hidden': 'true' }, 'R'),
      h('h1', { id: 'login-title' }, t('login.title')),
      langButton()),
    h('p', { class: 'muted' }, t('login.subtitle')),
    h('div', { class: 'field' }, h('label', { for: 'login-username' }, t('login.username')), username),
    h('div', { class: 'field' }, h('label', { for: 'login-password' }, t('login.password')), password),
    errorBox,
    submit);
  // Single sign-on (GET /auth/providers): a "Sign in with …" button above
  // the form; with password sign-in off the form is only the break-glass
  // admin's, folded away. A failed SSO callback lands here with ?sso_error=.
  const ssoError = new URLSearchParams(location.search).get('sso_error');
  if (ssoError) {
    errorBox.textContent = t('login.ssoFailed', { reason: ssoError });
    errorBox.hidden = false;
    history.replaceState(null, '', location.pathname + location.hash);
  }
  get('/auth/providers').then((info) => {
    if (!info?.sso || !form.isConnected) return;
    const back = sessionStorage.getItem('ragent.returnTo') || '';
    const href = info.sso.loginUrl + (back.startsWith('#/') && back !== '#/login' ? `?returnTo=${encodeURIComponent(back)}` : '');
    const button = h('a', { class: 'btn btn-primary btn-block', href, 'data-testid': 'login-sso' }, t('login.sso', { name: info.sso.name }));
    const fields = [...form.querySelectorAll('.field'), submit];
    form.querySelector('.muted').after(button, h('p', { class: 'muted login-or' }, t('login.or')));
    submit.className = 'btn btn-block';
    if (!info.passwordLogin) {
      const fold = h('details', { 'data-testid': 'login-break-glass' }, h('summary', {}, t('login.breakGlass')), ...fields);
      errorBox.before(fold);
    }
  }, () => {});
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    errorBox.hidden = true;
    submit.disabled = true;
    try {
      const res = await post('/auth/login', { username: username.value.trim(), password: password.value });
      state.user = res.user;
      await Promise.all([refreshCurator(), loadLimits()]);
      const back = sessionStorage.getItem('ragent.returnTo');
      sessionStorage.removeItem('ragent.returnTo');
      location.hash = back && back !== '#/login' ? back : '#/chat';
    } catch (err) {
      errorBox.textContent = err.status === 401 ? t('login.failed') : errorText(err);
      errorBox.hidden = false;
      password.select();
    } finally {
      submit.disabled = false;
    }
  });
  clear(appRoot).append(h('div', { class: 'login-page' }, form));
  username.focus();
}

async function boot() {
  document.documentElement.lang = getLang() === 'zh' ? 'zh-CN' : 'en';
  window.addEventListener('ragent:unauthorized', () => {
    if (!state.user) return;
    state.user = null;
    destroyPage();
    toast(t('shell.sessionExpired'), 'info');
    route();
  });
  window.addEventListener('hashchange', () => route());
  try {
    const me = await get('/me');
    state.user = me?.user ?? me;
    await Promise.all([refreshCurator(), loadLimits()]);
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) toast(errorText(err));
    state.user = null;
  }
  route();
}

boot();
