// The chat page: conversation list, message history, composer, and the
// streamed answer (SSE over fetch, see DESIGN §6).
import { t } from './i18n.js';
import { h, icon, toast, errorText, setTrustedHTML, confirmDialog, promptDialog, formatTime } from './dom.js';
import { get, post, patch, del, enc, streamChat, resumeChat, newIdempotencyKey } from './api.js';
import { renderMarkdown } from './markdown.js';

const DEEP_KEY = 'ragent.deepThinking';
const KB_KEY = 'ragent.kbFilter';
// The answer being streamed, kept for this tab until its stream ends, so a
// reload (or coming back to its conversation) resumes it.
const ANSWER_KEY = 'ragent.answer';
const RETRY_DELAYS = [250, 500, 1000, 2000, 4000, 8000, 8000, 8000, 8000, 8000];

function savedAnswer() {
  try {
    return JSON.parse(sessionStorage.getItem(ANSWER_KEY) || 'null');
  } catch {
    return null;
  }
}

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

  function userMessage(text) {
    return h('article', { class: 'msg user', 'data-testid': 'user-message' },
      h('div', { class: 'bubble' }, h('p', { class: 'plain' }, text)));
  }

  // assistantView renders one answer and updates it as events arrive.
  // key is the question's Idempotency-Key, which its retry button sends
  // again ('' for an answer shown from history or resumed: a new one).
  function assistantView(question, key = '') {
    let answer = '';
    let thinking = '';
    let sources = [];
    let frame = 0;
    const citations = (n) => sources.some((src) => src.index === n);
    const citeLabel = (n) => {
      const name = sources.find((src) => src.index === n)?.documentName;
      return name ? t('chat.citeNamed', { n, name }) : t('chat.cite', { n });
    };
    const md = (text) => renderMarkdown(text, { citations, citeLabel, copyLabel: t('chat.copy') });

    const status = h('div', { class: 'status-line', 'data-testid': 'pending-indicator', 'aria-live': 'polite' },
      h('span', { class: 'dots', 'aria-hidden': 'true' }, h('i'), h('i'), h('i')), t('chat.thinkingWait'));
    const thinkBody = h('div', { class: 'md thinking-body' });
    const thinkSummary = h('summary', {}, t('chat.reasoning'));
    const think = h('details', { class: 'thinking', 'data-testid': 'thinking', hidden: true }, thinkSummary, thinkBody);
    const body = h('div', { class: 'md answer', 'data-testid': 'answer' });
    const notice = h('div', { class: 'notice', hidden: true, 'data-testid': 'message-notice', role: 'status' });
    const reconnect = h('div', { class: 'status-line', hidden: true, 'data-testid': 'reconnecting-indicator', role: 'status' },
      h('span', { class: 'dots', 'aria-hidden': 'true' }, h('i'), h('i'), h('i')), t('chat.reconnecting'));
    const sourceList = h('ol', { class: 'source-list' });
    const sourcesPanel = h('details', { class: 'sources', 'data-testid': 'sources-panel', hidden: true, open: true },
      h('summary', {}, h('span', { class: 'sources-title' }, t('chat.sources'))), sourceList);
    const el = h('article', { class: 'msg assistant', 'data-testid': 'assistant-message', 'data-status': 'streaming', 'aria-busy': 'true' },
      h('div', { class: 'avatar', 'aria-hidden': 'true' }, 'R'),
      h('div', { class: 'bubble' }, think, status, body, reconnect, notice, sourcesPanel));

    function render() {
      frame = 0;
      if (thinking) {
        think.hidden = false;
        setTrustedHTML(thinkBody, md(thinking));
      }
      setTrustedHTML(body, md(answer));
      scrollToBottom();
    }

    // schedule coalesces deltas into at most one Markdown render per frame.
    function schedule() {
      if (!frame) frame = requestAnimationFrame(render);
    }

    function flush() {
      if (frame) cancelAnimationFrame(frame);
      render();
    }

    function setSources(list) {
      sources = Array.isArray(list) ? list : [];
      // Scores are Reciprocal Rank Fusion values (around 0.016): meaningless
      // on their own, so the bar shows each score relative to the answer's
      // best source and the raw value stays in the tooltip.
      const top = Math.max(0, ...sources.map((src) => Number(src.score) || 0));
      sourceList.replaceChildren(...sources.map((src) => {
        const score = Number(src.score) || 0;
        const pct = top > 0 ? Math.round((score / top) * 100) : 0;
        const fill = h('span', { class: 'score-fill' });
        fill.style.width = `${pct}%`;
        return h('li', {
          class: 'source-item', tabindex: '-1', 'data-testid': 'source-item',
          'data-index': src.index, 'data-document-id': src.documentId,
        },
        h('div', { class: 'source-head' },
          h('span', { class: 'source-index' }, `[${src.index}]`),
          h('span', { class: 'source-name' }, src.documentName || src.documentId),
          top > 0 ? h('span', { class: 'source-score', title: t('chat.scoreTitle', { pct, score: score.toFixed(4) }) },
            h('span', { class: 'score-label', 'aria-hidden': 'true' }, t('chat.relevance')),
            h('span', { class: 'score-bar', 'aria-hidden': 'true' }, fill),
            h('span', { class: 'visually-hidden' }, t('chat.scoreRelative', { pct }))) : null),
        h('p', { class: 'source-excerpt' }, src.excerpt ?? ''));
      }));
      sourcesPanel.hidden = sources.length === 0;
      sourcesPanel.querySelector('.sources-title').textContent = `${t('chat.sources')} (${sources.length})`;
    }

    function setNotice(kind, text, retry) {
      notice.hidden = false;
      notice.dataset.kind = kind;
      notice.className = `notice notice-${kind}`;
      notice.replaceChildren(h('span', {}, text));
      if (retry && question) {
        notice.append(h('button', {
          type: 'button', class: 'btn btn-sm', 'data-testid': 'retry-button',
          onClick: () => { if (!s.streaming) send(question, key); },
        }, t('chat.retry')));
      }
    }

    // feedback is the thumbs up/down of a completed answer, with an
    // optional comment after a thumbs down (README "Answer feedback").
    function feedbackBar() {
      const id = el.dataset.messageId;
      if (!id || el.querySelector('.feedback-bar')) return;
      const comment = h('textarea', { class: 'feedback-comment', rows: 2, maxlength: 2000, 'data-testid': 'feedback-comment', 'aria-label': t('feedback.commentLabel'), placeholder: t('feedback.commentHint') });
      const sendComment = h('button', { type: 'button', class: 'btn btn-sm', 'data-testid': 'feedback-send' }, t('feedback.send'));
      const more = h('div', { class: 'feedback-more', hidden: true }, comment, sendComment);
      const rate = async (rating, text) => {
        try {
          await post(`/messages/${enc(id)}/feedback`, { rating, comment: text ?? '' });
          bar.dataset.rating = rating;
          up.setAttribute('aria-pressed', String(rating === 'up'));
          down.setAttribute('aria-pressed', String(rating === 'down'));
          more.hidden = rating !== 'down';
          if (text !== undefined) {
            bar.dataset.commentSaved = 'true'; // what a test waits for
            toast(t('feedback.thanks'), 'info');
          }
        } catch (err) {
          toast(errorText(err));
        }
      };
      const up = h('button', { type: 'button', class: 'icon-btn', 'data-testid': 'feedback-up', 'aria-pressed': 'false', title: t('feedback.up'), 'aria-label': t('feedback.up'), onClick: () => rate('up') }, '👍');
      const down = h('button', { type: 'button', class: 'icon-btn', 'data-testid': 'feedback-down', 'aria-pressed': 'false', title: t('feedback.down'), 'aria-label': t('feedback.down'), onClick: () => rate('down') }, '👎');
      sendComment.addEventListener('click', () => rate('down', comment.value));
      const bar = h('div', { class: 'feedback-bar', 'data-testid': 'feedback-bar' }, up, down, more);
      el.querySelector('.bubble').append(bar);
    }

    function end(statusValue) {
      if (statusValue === 'completed') queueMicrotask(feedbackBar);
      status.remove();
      el.dataset.status = statusValue;
      el.removeAttribute('aria-busy');
      flush();
      if (!answer && !thinking) body.hidden = true;
      think.open = false;
      thinkSummary.textContent = t('chat.reasoning');
    }

    return {
      el,
      question,
      setMessageId(id) { if (id) el.dataset.messageId = id; },
      queue(position, queued) {
        status.dataset.testid = 'queue-indicator';
        status.dataset.position = position;
        status.dataset.queued = queued;
        status.className = 'status-line queued';
        status.replaceChildren(h('span', { class: 'dots', 'aria-hidden': 'true' }, h('i'), h('i'), h('i')),
          t('chat.queued', { position, queued }));
      },
      started() {
        if (status.isConnected && status.dataset.testid === 'queue-indicator') {
          status.dataset.testid = 'pending-indicator';
          status.className = 'status-line';
          status.replaceChildren(h('span', { class: 'dots', 'aria-hidden': 'true' }, h('i'), h('i'), h('i')), t('chat.thinkingWait'));
        }
      },
      setSources,
      reconnecting(on) { reconnect.hidden = !on; },
      delta(type, text) {
        if (status.isConnected) status.remove();
        if (type === 'think') {
          thinking += text;
          if (!think.open && !answer) think.open = true; // show reasoning live, fold it when the answer starts
          thinkSummary.textContent = t('chat.reasoningLive');
        } else {
          if (!answer && thinking) think.open = false;
          answer += text;
          thinkSummary.textContent = t('chat.reasoning');
        }
        schedule();
      },
      rejected(message) { end('rejected'); setNotice('rejected', message || t('chat.busy'), true); },
      cancelled(reason) { end('cancelled'); setNotice('cancelled', t(`chat.cancelled.${reason}`, {}, t('chat.cancelled.user'))); },
      failed(message) { end('failed'); setNotice('failed', `${t('chat.failed')}${message ? ': ' + message : ''}`, true); },
      completed() { end('completed'); },
      get status() { return el.dataset.status; },
      loadHistory(m) {
        answer = m.content ?? '';
        thinking = m.thinking ?? '';
        this.setMessageId(m.id);
        setSources(typeof m.sources === 'string' ? safeJSON(m.sources) : m.sources);
        switch (m.status) {
          case 'rejected': this.rejected(''); break;
          case 'cancelled': this.cancelled('user'); break;
          case 'failed': this.failed(''); break;
          default: this.completed();
        }
      },
    };
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

  function newStream(view, question, conversationId) {
    const st = { controller: new AbortController(), taskId: null, lastId: '', view, question, stopRequested: false, conversationId, finished: false, done: false, errorMessage: '' };
    s.streaming = st;
    setStreamingUI(true);
    return st;
  }

  // follow reads an answer's stream to its end: open's first, then, after a
  // dropped connection, the task's events after the last one seen, retrying
  // while the server keeps the answer (it runs on without us).
  async function follow(st, open) {
    const { view } = st;
    const onEvent = eventHandler(st);
    const onId = (id) => { st.lastId = id; };
    try {
      for (let attempt = 0; ; attempt++) {
        try {
          await open(onEvent, onId);
          if (st.done || st.finished || !st.taskId) break;
        } catch (err) {
          if (err?.name === 'AbortError' || !st.taskId || err?.status !== 0) throw err;
        }
        // Cut before done: pick the answer up again where it was.
        if (attempt >= RETRY_DELAYS.length) break;
        view.reconnecting(true);
        await sleep(RETRY_DELAYS[attempt], st.controller.signal);
        open = (onEvent, onId) => resumeChat(st.taskId, st.lastId, onEvent, st.controller.signal, onId);
      }
      view.reconnecting(false);
      if (!st.finished && view.status === 'streaming') {
        if (st.errorMessage) view.failed(st.errorMessage);
        else view.failed(t('chat.streamEnded'));
      }
    } catch (err) {
      view.reconnecting(false);
      if (view.status === 'streaming') {
        if (err?.name === 'AbortError') view.cancelled(st.stopRequested ? 'user' : 'disconnect');
        else if (err?.status === 429) view.rejected(err.message);
        else if (err?.status === 404 && st.taskId) view.failed(t('chat.resumeGone'));
        else view.failed(errorText(err));
      }
    } finally {
      // A page that leaves keeps the record so it can resume; an answer
      // that ended (or cannot be resumed) forgets it.
      if (!st.leaving && !s.destroyed && savedAnswer()?.taskId === st.taskId) sessionStorage.removeItem(ANSWER_KEY);
      if (s.streaming === st) s.streaming = null;
      if (!s.destroyed) setStreamingUI(false);
    }
  }

  function eventHandler(st) {
    const { view, question } = st;
    const onEvent = (name, data) => {
      if (s.destroyed) return;
      view.reconnecting(false);
      switch (name) {
        case 'meta':
          st.taskId = data.taskId;
          view.setMessageId(data.messageId);
          if (data.conversationId) {
            sessionStorage.setItem(ANSWER_KEY, JSON.stringify({
              taskId: data.taskId, messageId: data.messageId, conversationId: data.conversationId, question,
            }));
          }
          if (data.conversationId && !s.current) {
            s.current = data.conversationId;
            st.conversationId = data.conversationId;
            st.newConversation = true;
            s.conversations.unshift({ id: data.conversationId, title: question.slice(0, 40), updatedAt: new Date().toISOString() });
            // Record the conversation in the URL without triggering the router,
            // so a reload shows this history.
            history.replaceState(null, '', `#/chat/${enc(data.conversationId)}`);
            renderConversations();
          }
          break;
        case 'queue':
          view.queue(data.position, data.queued);
          break;
        case 'sources':
          view.started();
          view.setSources(data.sources);
          break;
        case 'message':
          view.delta(data.type, data.delta ?? '');
          break;
        case 'reject':
          st.finished = true;
          view.rejected(data.message);
          break;
        case 'cancel':
          st.finished = true;
          view.cancelled(data.reason);
          break;
        case 'error':
          st.errorMessage = data.message || data.code || '';
          break;
        case 'finish':
          st.finished = true;
          view.setMessageId(data.messageId);
          if (view.status === 'streaming') {
            if (data.status === 'completed') view.completed();
            else if (data.status === 'rejected') view.rejected('');
            else if (data.status === 'cancelled') view.cancelled('user');
            else view.failed(st.errorMessage);
          }
          if (data.saved === false && st.newConversation) {
            // Refused before it started: the server kept nothing, so the
            // conversation named in meta does not exist. The next question
            // starts a new one.
            s.conversations = s.conversations.filter((x) => x.id !== st.conversationId);
            if (s.current === st.conversationId) {
              s.current = null;
              history.replaceState(null, '', '#/chat');
            }
            renderConversations();
          } else if (!st.resumed) {
            touchConversation(st.conversationId, data.title);
          }
          break;
        case 'done':
          st.done = true;
          break;
        default:
          break; // unknown events are ignored so the server can add more
      }
    };
    return onEvent;
  }

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

function safeJSON(text) {
  try {
    return JSON.parse(text);
  } catch {
    return [];
  }
}

// sleep waits ms, or rejects with an AbortError when signal aborts.
function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    if (signal.aborted) { reject(new DOMException('aborted', 'AbortError')); return; }
    const timer = setTimeout(() => { signal.removeEventListener('abort', onAbort); resolve(); }, ms);
    function onAbort() { clearTimeout(timer); reject(new DOMException('aborted', 'AbortError')); }
    signal.addEventListener('abort', onAbort, { once: true });
  });
}
