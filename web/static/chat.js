// The chat page: conversation list, knowledge-base filter, message history
// and composer. One exchange's view is in chat-answer.js, the streamed
// answer and its resume in chat-stream.js.
import { t } from './i18n.js';
import { h, icon, toast, errorText, confirmDialog, promptDialog, formatTime } from './dom.js';
import { get, post, patch, del, enc, streamChat, resumeChat, newIdempotencyKey } from './api.js';
import { userMessage, answerView } from './chat-answer.js';
import { ANSWER_KEY, savedAnswer, answerStreams } from './chat-stream.js';

const DEEP_KEY = 'ragent.deepThinking';
const KB_KEY = 'ragent.kbFilter';

export function mountChat(root, ctx) {
  const s = {
    conversations: [],
    nextCursor: null,
    current: ctx.params.id,
    kbs: [],
    selectedKbs: new Set(JSON.parse(localStorage.getItem(KB_KEY) || '[]')),
    streaming: null, // { controller, taskId, view, stopRequested, question }
    loadToken: 0, // discards history responses for a conversation no longer shown
    destroyed: false,
  };

  // ---- layout ----
  const convList = h('ul', { class: 'conv-list', role: 'list' });
  const loadMore = h('button', { type: 'button', class: 'btn btn-ghost btn-block', 'data-testid': 'conv-load-more', hidden: true, onClick: () => loadConversations(true) }, t('chat.loadMore'));
  const panel = h('aside', { id: 'conv-panel', class: 'conv-panel', 'data-testid': 'conversation-list', 'aria-label': t('chat.conversations') },
    h('div', { class: 'conv-panel-head' },
      h('button', { type: 'button', class: 'btn btn-primary btn-block', 'data-testid': 'new-chat-button', onClick: newChat }, '+ ' + t('chat.new'))),
    h('h2', { class: 'sr-only' }, t('chat.conversations')),
    convList,
    loadMore);
  const backdrop = h('div', { class: 'drawer-backdrop', hidden: true, onClick: () => toggleDrawer(false) });
  const drawerBtn = h('button', {
    type: 'button', class: 'icon-btn drawer-toggle', 'data-testid': 'conv-drawer-toggle',
    'aria-controls': 'conv-panel', 'aria-expanded': 'false', 'aria-label': t('chat.toggleList'),
    onClick: () => toggleDrawer(!panel.classList.contains('open')),
  }, icon('menu'));
  const title = h('h1', { class: 'chat-title', 'data-testid': 'chat-title' }, t('chat.new'));
  const messages = h('div', { class: 'messages', 'data-testid': 'message-list', role: 'log', 'aria-label': t('chat.messages'), 'aria-live': 'polite', 'aria-relevant': 'additions' });

  const input = h('textarea', {
    id: 'chat-input', class: 'chat-input', rows: 1, 'data-testid': 'chat-input',
    placeholder: t('chat.placeholder'), 'aria-label': t('chat.inputLabel'), maxlength: ctx.limits.questionRunes,
  });
  const deep = h('input', { id: 'deep-thinking', type: 'checkbox', 'data-testid': 'deep-thinking-toggle', checked: localStorage.getItem(DEEP_KEY) === '1' });
  deep.addEventListener('change', () => localStorage.setItem(DEEP_KEY, deep.checked ? '1' : '0'));
  const kbSummary = h('summary', { class: 'btn btn-ghost btn-sm' });
  const kbOptions = h('fieldset', { class: 'kb-options' }, h('legend', {}, t('chat.kbFilterLegend')));
  const kbFilter = h('details', { class: 'kb-filter', 'data-testid': 'kb-filter' }, kbSummary, kbOptions);
  const sendBtn = h('button', { type: 'submit', class: 'btn btn-primary', 'data-testid': 'send-button' }, t('chat.send'));
  const stopBtn = h('button', { type: 'button', class: 'btn btn-danger', 'data-testid': 'stop-button', hidden: true, onClick: stop }, '■ ' + t('chat.stop'));
  const composer = h('form', { class: 'composer', 'data-testid': 'composer', 'aria-label': t('chat.composer') },
    input,
    h('div', { class: 'composer-bar' },
      h('label', { class: 'toggle', for: 'deep-thinking' }, deep, h('span', {}, t('chat.deepThinking'))),
      kbFilter,
      h('span', { class: 'composer-hint muted' }, t('chat.enterHint')),
      h('span', { class: 'spacer' }),
      stopBtn,
      sendBtn));

  root.append(h('div', { class: 'chat-layout' },
    panel,
    backdrop,
    h('section', { class: 'chat-main', 'aria-labelledby': 'chat-title-h' },
      h('div', { class: 'chat-toolbar' }, drawerBtn, title),
      messages,
      composer)));
  title.id = 'chat-title-h';

  // ---- events ----
  composer.addEventListener('submit', (e) => {
    e.preventDefault();
    const q = input.value.trim();
    if (!q || s.streaming) return;
    input.value = '';
    autoGrow();
    send(q);
  });
  input.addEventListener('keydown', (e) => {
    // Enter sends; Shift+Enter adds a line. isComposing keeps Chinese IME
    // candidate selection from sending half-typed text.
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing && e.keyCode !== 229) {
      e.preventDefault();
      composer.requestSubmit();
    }
  });
  input.addEventListener('input', autoGrow);
  messages.addEventListener('click', onMessagesClick);
  const onKey = (e) => {
    if (e.key === 'Escape' && panel.classList.contains('open')) toggleDrawer(false);
  };
  document.addEventListener('keydown', onKey);

  function autoGrow() {
    input.style.height = 'auto';
    input.style.height = `${Math.min(input.scrollHeight, 200)}px`;
  }

  function toggleDrawer(open) {
    panel.classList.toggle('open', open);
    backdrop.hidden = !open;
    drawerBtn.setAttribute('aria-expanded', String(open));
    if (open) panel.querySelector('button')?.focus();
  }

  function onMessagesClick(e) {
    const cite = e.target.closest('.cite');
    if (cite) {
      const article = cite.closest('.msg');
      const item = article?.querySelector(`[data-testid=source-item][data-index="${cite.dataset.cite}"]`);
      if (item) {
        item.closest('details')?.setAttribute('open', '');
        item.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
        item.classList.remove('flash');
        void item.offsetWidth; // restart the highlight animation
        item.classList.add('flash');
        item.focus({ preventScroll: true });
      }
      return;
    }
    const copy = e.target.closest('[data-copy-code]');
    if (copy) {
      const code = copy.closest('.code-block')?.querySelector('code')?.textContent ?? '';
      navigator.clipboard?.writeText(code).then(
        () => toast(t('chat.copied'), 'info'),
        () => toast(t('chat.copyFailed')));
    }
  }

  // ---- knowledge-base filter ----
  function renderKbFilter() {
    const names = s.kbs.filter((kb) => s.selectedKbs.has(kb.id)).map((kb) => kb.name);
    kbSummary.textContent = names.length === 0 ? t('chat.kbAll') : t('chat.kbSome', { names: names.join(', ') });
    kbSummary.title = kbSummary.textContent;
    kbOptions.replaceChildren(h('legend', {}, t('chat.kbFilterLegend')));
    if (s.kbs.length === 0) kbOptions.append(h('p', { class: 'muted' }, t('chat.kbNone')));
    for (const kb of s.kbs) {
      const id = `kbf-${kb.id}`;
      const cb = h('input', { type: 'checkbox', id, 'data-testid': 'kb-filter-option', 'data-kb-id': kb.id, checked: s.selectedKbs.has(kb.id) });
      cb.addEventListener('change', () => {
        if (cb.checked) s.selectedKbs.add(kb.id); else s.selectedKbs.delete(kb.id);
        localStorage.setItem(KB_KEY, JSON.stringify([...s.selectedKbs]));
        renderKbFilter();
        document.getElementById(id)?.focus();
      });
      kbOptions.append(h('label', { class: 'check', for: id }, cb, h('span', {}, kb.name)));
    }
  }

  async function loadKbs() {
    try {
      const res = await get('/knowledge-bases?limit=200');
      s.kbs = res?.items ?? [];
      // Forget selections of knowledge bases that no longer exist.
      for (const id of [...s.selectedKbs]) if (!s.kbs.some((kb) => kb.id === id)) s.selectedKbs.delete(id);
    } catch (err) {
      toast(errorText(err));
    }
    if (!s.destroyed) renderKbFilter();
  }

  // ---- conversations ----
  function renderConversations() {
    convList.replaceChildren(...s.conversations.map((c) => {
      const active = c.id === s.current;
      return h('li', { class: active ? 'conv-item active' : 'conv-item', 'data-testid': 'conversation-item', 'data-id': c.id, 'aria-current': active ? 'true' : null },
        h('a', { class: 'conv-link', href: `#/chat/${enc(c.id)}`, 'data-testid': 'conversation-title', title: c.title || t('chat.untitled'), onClick: () => toggleDrawer(false) },
          h('span', { class: 'conv-title' }, c.title || t('chat.untitled')),
          h('small', { class: 'muted' }, formatTime(c.updatedAt || c.createdAt))),
        h('span', { class: 'conv-actions' },
          h('button', { type: 'button', class: 'icon-btn', 'data-testid': 'conv-rename', 'aria-label': t('chat.rename') + ': ' + (c.title || t('chat.untitled')), title: t('chat.rename'), onClick: () => rename(c) }, icon('edit')),
          h('button', { type: 'button', class: 'icon-btn', 'data-testid': 'conv-delete', 'aria-label': t('common.delete') + ': ' + (c.title || t('chat.untitled')), title: t('common.delete'), onClick: () => remove(c) }, icon('trash'))));
    }));
    if (s.conversations.length === 0) convList.append(h('li', { class: 'muted conv-empty' }, t('chat.noConversations')));
    loadMore.hidden = !s.nextCursor;
    const cur = s.conversations.find((c) => c.id === s.current);
    title.textContent = cur?.title || (s.current ? t('chat.untitled') : t('chat.new'));
  }

  async function loadConversations(more = false) {
    try {
      const q = more && s.nextCursor ? `?cursor=${enc(s.nextCursor)}` : '';
      const res = await get(`/conversations${q}`);
      const items = res?.items ?? [];
      s.conversations = more ? [...s.conversations, ...items.filter((c) => !s.conversations.some((x) => x.id === c.id))] : items;
      s.nextCursor = res?.nextCursor || null;
    } catch (err) {
      toast(errorText(err));
    }
    if (!s.destroyed) renderConversations();
  }

  async function rename(c) {
    const value = await promptDialog(t('chat.renamePrompt'), c.title || '');
    if (value === null || !value.trim() || value.trim() === c.title) return;
    try {
      const updated = await patch(`/conversations/${enc(c.id)}`, { title: value.trim() });
      c.title = updated?.title ?? value.trim();
      renderConversations();
    } catch (err) {
      toast(errorText(err));
    }
  }

  async function remove(c) {
    if (!(await confirmDialog(t('chat.deleteConfirm', { title: c.title || t('chat.untitled') }), { okLabel: t('common.delete'), danger: true }))) return;
    try {
      await del(`/conversations/${enc(c.id)}`);
      s.conversations = s.conversations.filter((x) => x.id !== c.id);
      if (c.id === s.current) location.hash = '#/chat';
      else renderConversations();
    } catch (err) {
      toast(errorText(err));
    }
  }

  function newChat() {
    toggleDrawer(false);
    if (location.hash === '#/chat') showConversation(null);
    else location.hash = '#/chat';
    input.focus();
  }

  // ---- history ----
  function showEmpty() {
    messages.replaceChildren(h('div', { class: 'chat-empty' },
      h('h2', {}, t('chat.emptyTitle')),
      h('p', { class: 'muted' }, t('chat.emptyHint'))));
  }

  async function showConversation(id) {
    if (s.streaming && (id === null || s.streaming.conversationId !== id)) {
      // Leaving the conversation closes the stream; the answer runs on on
      // the server and is saved (or resumed when the user comes back).
      s.streaming.leaving = true;
      s.streaming.controller.abort();
      s.streaming = null;
      setStreamingUI(false);
    }
    s.current = id;
    renderConversations();
    const token = ++s.loadToken;
    if (!id) { showEmpty(); return; }
    if (s.streaming) return; // the live view is already on screen
    messages.replaceChildren(h('p', { class: 'muted loading' }, t('common.loading')));
    try {
      const res = await get(`/conversations/${enc(id)}/messages`);
      if (token !== s.loadToken || s.destroyed) return;
      messages.replaceChildren();
      let lastQuestion = '';
      let last = null;
      const saved = savedAnswer();
      let answered = false;
      for (const m of res?.messages ?? []) {
        last = m;
        if (m.role === 'user') {
          lastQuestion = m.content;
          messages.append(userMessage(m.content));
        } else if (m.role === 'assistant') {
          if (saved && m.id === saved.messageId) answered = true;
          const v = assistantView(lastQuestion);
          v.loadHistory(m);
          messages.append(v.el);
        }
      }
      if (saved?.conversationId === id) {
        if (answered) sessionStorage.removeItem(ANSWER_KEY);
        else {
          // The answer was still streaming when this page left it: show it
          // continuing (its question is in the history once it got a slot).
          resume(saved, !(last?.role === 'user' && last.content === saved.question));
          return;
        }
      }
      if (!messages.firstChild) showEmpty();
      scrollToBottom(true);
    } catch (err) {
      if (token !== s.loadToken || s.destroyed) return;
      const saved = savedAnswer();
      if (err?.status === 404 && saved?.conversationId === id) {
        // A first question still queued: its conversation is written once
        // it gets a slot. Follow it meanwhile.
        messages.replaceChildren();
        resume(saved, true);
        return;
      }
      messages.replaceChildren(h('p', { class: 'form-error', role: 'alert' }, errorText(err)));
    }
  }

  function nearBottom() {
    return messages.scrollHeight - messages.scrollTop - messages.clientHeight < 80;
  }

  function scrollToBottom(force = false) {
    if (force || nearBottom()) messages.scrollTop = messages.scrollHeight;
  }

  function assistantView(question, key = '') {
    return answerView(question, key, { scrollToBottom, retry: (q, k) => { if (!s.streaming) send(q, k); } });
  }

  // ---- sending ----
  // send asks question under key, its Idempotency-Key: a fresh one for
  // each question typed, the same one when its retry button sends it again,
  // so a retry of a question the server took (its answer's stream was cut
  // before it showed) follows that answer instead of asking twice.
  async function send(question, key = newIdempotencyKey()) {
    if (s.streaming) return;
    if (!s.current || !messages.querySelector('.msg')) messages.replaceChildren();
    messages.append(userMessage(question));
    const view = assistantView(question, key);
    messages.append(view.el);
    scrollToBottom(true);

    const body = { question };
    if (s.current) body.conversationId = s.current;
    if (s.selectedKbs.size > 0) body.knowledgeBaseIds = [...s.selectedKbs];
    if (deep.checked) body.deepThinking = true;

    const st = newStream(view, question, s.current);
    await follow(st, (onEvent, onId) => streamChat(body, onEvent, st.controller.signal, onId, key));
  }

  // resume shows an answer that was streaming when the page left it, from
  // its first event, and follows it to its end.
  async function resume(saved, withQuestion) {
    if (s.streaming) return;
    if (withQuestion) messages.append(userMessage(saved.question));
    const view = assistantView(saved.question);
    messages.append(view.el);
    scrollToBottom(true);
    const st = newStream(view, saved.question, saved.conversationId);
    st.taskId = saved.taskId;
    st.resumed = true;
    await follow(st, (onEvent, onId) => resumeChat(st.taskId, '', onEvent, st.controller.signal, onId));
  }

  const { newStream, follow } = answerStreams(s, { setStreamingUI, renderConversations, touchConversation });

  function touchConversation(id, newTitle) {
    const c = s.conversations.find((x) => x.id === id);
    if (!c) { loadConversations(); return; }
    if (newTitle) c.title = newTitle;
    c.updatedAt = new Date().toISOString();
    s.conversations = [c, ...s.conversations.filter((x) => x !== c)];
    renderConversations();
  }

  function setStreamingUI(on) {
    ctx.setBusy(on);
    stopBtn.hidden = !on;
    stopBtn.disabled = false;
    sendBtn.hidden = on;
    sendBtn.disabled = on;
    if (!on) input.focus({ preventScroll: true });
  }

  async function stop() {
    const st = s.streaming;
    if (!st) return;
    st.stopRequested = true;
    stopBtn.disabled = true;
    if (!st.taskId) { st.controller.abort(); return; }
    try {
      await post(`/chat/tasks/${enc(st.taskId)}/stop`);
    } catch (err) {
      toast(errorText(err));
      st.controller.abort();
      return;
    }
    // The server answers with cancel/finish/done; if that never comes (an
    // instance died), closing the connection still ends the wait.
    setTimeout(() => { if (s.streaming === st) st.controller.abort(); }, 5000);
  }

  // ---- start ----
  renderKbFilter();
  loadKbs();
  loadConversations();
  showConversation(s.current);

  return {
    update(params) {
      if (params.id !== s.current) showConversation(params.id);
    },
    destroy() {
      s.destroyed = true;
      s.streaming?.controller.abort();
      document.removeEventListener('keydown', onKey);
      ctx.setBusy(false);
    },
  };
}
