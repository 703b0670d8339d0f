// Usage page (admins): tokens per day as a bar chart, the top users and API
// keys of a date range, and the quotas (docs/usage-and-quotas.md "Usage and quotas").
import { t } from './i18n.js';
import { h, clear, field, toast, errorText } from './dom.js';
import { get, put, del, enc } from './api.js';
import { pageHeader, formError, showFormError, emptyRow, dataTable, rowAction } from './admin.js';

const today = () => new Date().toISOString().slice(0, 10);
const monthStart = () => `${today().slice(0, 8)}01`;
const num = (n) => Number(n || 0).toLocaleString();

// monthUsage reads the signed-in user's own usage this month (the account
// dialog shows it).
export async function monthUsage() {
  const page = await get('/usage');
  const row = page.items[0] || {};
  return { tokens: row.totalTokens || 0, requests: row.requests || 0 };
}

export function mountUsage(root, ctx) {
  let destroyed = false;
  const from = h('input', { id: 'usage-from', type: 'date', value: monthStart(), 'data-testid': 'usage-from' });
  const to = h('input', { id: 'usage-to', type: 'date', value: today(), 'data-testid': 'usage-to' });
  const errBox = formError();
  const filters = h('form', { class: 'card form-card', 'data-testid': 'usage-filters' },
    h('div', { class: 'form-grid' }, field(t('usage.from'), from), field(t('usage.to'), to)),
    errBox,
    h('div', { class: 'form-actions' }, h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'usage-apply' }, t('usage.apply'))));
  const chart = h('div', { class: 'usage-chart', 'data-testid': 'usage-chart', role: 'img', 'aria-label': t('usage.chart') });
  const users = h('tbody', { 'data-testid': 'usage-top-users' });
  const keys = h('tbody', { 'data-testid': 'usage-top-keys' });
  const quotas = h('tbody', { 'data-testid': 'quota-table' });

  const subject = h('select', { id: 'quota-subject', 'data-testid': 'quota-subject' },
    ...['user', 'group', 'key'].map((s) => h('option', { value: s }, t(`usage.subject.${s}`))));
  const subjectId = h('input', { id: 'quota-subject-id', required: true, inputmode: 'numeric', autocomplete: 'off', 'data-testid': 'quota-subject-id' });
  const limit = (id) => h('input', { id, type: 'number', min: '0', step: '1', value: '0', 'data-testid': id });
  const dailyTokens = limit('quota-daily-tokens');
  const monthlyTokens = limit('quota-monthly-tokens');
  const dailyRequests = limit('quota-daily-requests');
  const monthlyRequests = limit('quota-monthly-requests');
  const quotaErr = formError();
  const quotaForm = h('form', { class: 'card form-card', 'data-testid': 'quota-form' },
    h('h2', {}, t('usage.quotaTitle')),
    h('p', { class: 'muted' }, t('usage.quotaHint')),
    h('div', { class: 'form-grid' },
      field(t('usage.subject'), subject), field(t('usage.subjectId'), subjectId),
      field(t('usage.dailyTokens'), dailyTokens), field(t('usage.monthlyTokens'), monthlyTokens),
      field(t('usage.dailyRequests'), dailyRequests), field(t('usage.monthlyRequests'), monthlyRequests)),
    quotaErr,
    h('div', { class: 'form-actions' }, h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'quota-submit' }, t('usage.saveQuota'))));

  root.append(h('div', { class: 'page' },
    pageHeader(t('usage.title'), t('usage.subtitle')),
    filters,
    h('section', { class: 'card' }, h('h2', {}, t('usage.perDay')), chart),
    h('div', { class: 'usage-tops' },
      h('section', {}, h('h2', {}, t('usage.topUsers')), dataTable([t('usage.user'), t('usage.tokens'), t('usage.requests')], users)),
      h('section', {}, h('h2', {}, t('usage.topKeys')), dataTable([t('usage.key'), t('usage.tokens'), t('usage.requests')], keys))),
    quotaForm,
    dataTable([t('usage.subject'), t('usage.subjectId'), t('usage.dailyTokens'), t('usage.monthlyTokens'), t('usage.dailyRequests'), t('usage.monthlyRequests'), ''], quotas)));

  function drawChart(days) {
    clear(chart);
    if (!days.length) { chart.append(h('p', { class: 'muted' }, t('usage.empty'))); return; }
    const top = Math.max(...days.map((d) => d.totalTokens), 1);
    for (const d of days) {
      const pct = Math.max(2, Math.round((d.totalTokens / top) * 100));
      // Through CSSOM: the page's CSP refuses style attributes.
      const fill = h('span', { class: 'usage-bar-fill' });
      fill.style.height = `${pct}%`;
      chart.append(h('div', { class: 'usage-bar', 'data-testid': 'usage-bar', 'data-day': d.day, 'data-tokens': String(d.totalTokens), title: `${d.day}: ${num(d.totalTokens)}` },
        fill, h('small', {}, d.day.slice(5))));
    }
  }

  function topRows(tbody, rows, name, testid) {
    clear(tbody);
    for (const r of rows) {
      tbody.append(h('tr', { 'data-testid': testid, 'data-name': name(r) },
        h('td', {}, name(r)), h('td', {}, num(r.totalTokens)), h('td', {}, num(r.requests))));
    }
    if (!tbody.firstChild) tbody.append(emptyRow(3, t('usage.empty')));
  }

  async function load() {
    const range = `from=${enc(from.value)}&to=${enc(to.value)}&all=true`;
    try {
      const [days, byUser, byKey] = await Promise.all([
        get(`/usage?${range}&groupBy=day`),
        get(`/usage?${range}&groupBy=user&limit=10`),
        get(`/usage?${range}&groupBy=key&limit=11`),
      ]);
      if (destroyed) return;
      errBox.hidden = true;
      drawChart(days.items);
      topRows(users, byUser.items, (r) => r.username || `#${r.userId || '-'}`, 'usage-user-row');
      topRows(keys, byKey.items.filter((r) => r.keyId).slice(0, 10), (r) => r.keyName || `#${r.keyId}`, 'usage-key-row');
    } catch (err) {
      if (destroyed) return;
      if (err.status === 403) { ctx.forbidden(); return; }
      showFormError(errBox, err);
    }
  }

  async function loadQuotas() {
    try {
      const page = await get('/admin/quotas');
      if (destroyed) return;
      clear(quotas);
      for (const q of page.items) {
        quotas.append(h('tr', { 'data-testid': 'quota-row', 'data-subject': q.subject, 'data-subject-id': q.subjectId },
          h('td', {}, t(`usage.subject.${q.subject}`)), h('td', {}, q.subjectId),
          h('td', {}, num(q.dailyTokens)), h('td', {}, num(q.monthlyTokens)),
          h('td', {}, num(q.dailyRequests)), h('td', {}, num(q.monthlyRequests)),
          h('td', {}, rowAction('quota-delete', t('common.delete'), q.subjectId, async () => {
            try { await del(`/admin/quotas/${enc(q.subject)}/${enc(q.subjectId)}`); loadQuotas(); } catch (err) { toast(errorText(err)); }
          }, { danger: true }))));
      }
      if (!quotas.firstChild) quotas.append(emptyRow(7, t('usage.noQuotas')));
    } catch (err) {
      if (!destroyed) toast(errorText(err));
    }
  }

  filters.addEventListener('submit', (e) => { e.preventDefault(); load(); });
  quotaForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    quotaErr.hidden = true;
    try {
      await put('/admin/quotas', {
        subject: subject.value, subjectId: subjectId.value.trim(),
        dailyTokens: Number(dailyTokens.value), monthlyTokens: Number(monthlyTokens.value),
        dailyRequests: Number(dailyRequests.value), monthlyRequests: Number(monthlyRequests.value),
      });
      toast(t('usage.quotaSaved'), 'info');
      loadQuotas();
    } catch (err) {
      showFormError(quotaErr, err);
    }
  });
  load();
  loadQuotas();
  return { destroy() { destroyed = true; } };
}
