// ragent chat widget (docs/widget.md). A page embeds it with
//   <script src="https://HOST/widget.js" data-key="pk_…"></script>
// and gets a chat button and panel. Everything lives in a closed shadow root,
// so the page's CSS does not reach in and the widget's does not leak out;
// text from the server is only ever set as textContent.
(() => {
  "use strict";
  const script = document.currentScript;
  if (!script || !script.dataset.key) {
    console.error("ragent widget: the script tag needs data-key=\"pk_…\"");
    return;
  }
  const key = script.dataset.key;
  const base = new URL(script.src).origin;
  const lang = (script.dataset.lang || navigator.language || "en").toLowerCase().startsWith("zh") ? "zh" : "en";
  const text = {
    en: { open: "Ask a question", title: "Ask the knowledge base", placeholder: "Type your question…", send: "Send",
      stop: "Stop", sources: "Sources", busy: "Busy, please try again later.", failed: "Something went wrong.",
      stopped: "(stopped)", refused: "This site may not use this assistant.",
      revoked: "This assistant's key is invalid or revoked.", close: "Close" },
    zh: { open: "提问", title: "知识库问答", placeholder: "输入你的问题…", send: "发送", stop: "停止", sources: "来源",
      busy: "系统繁忙，请稍后再试。", failed: "出错了。", stopped: "（已停止）", refused: "此网站无权使用该助手。",
      revoked: "该助手的密钥无效或已被撤销。", close: "关闭" },
  }[lang];

  // The visitor id: random, kept by this browser for this site, never a
  // name. The server takes 16 to 64 characters of [A-Za-z0-9_-].
  const visitor = (() => {
    const make = () => {
      const b = new Uint8Array(24);
      crypto.getRandomValues(b);
      return btoa(String.fromCharCode(...b)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
    };
    try {
      let v = localStorage.getItem("ragent-widget-visitor");
      if (!v || !/^[A-Za-z0-9_-]{16,64}$/.test(v)) {
        v = make();
        localStorage.setItem("ragent-widget-visitor", v);
      }
      return v;
    } catch {
      return make(); // storage blocked: one id per page load
    }
  })();

  const host = document.createElement("div");
  host.setAttribute("data-ragent-widget", "");
  const root = host.attachShadow({ mode: "closed" });
  const style = document.createElement("style");
  style.textContent = `
    :host { all: initial; }
    * { box-sizing: border-box; font-family: system-ui, sans-serif; font-size: 14px; }
    .launcher { position: fixed; right: 20px; bottom: 20px; z-index: 2147483000; border: 0; border-radius: 24px;
      padding: 12px 18px; background: #2563eb; color: #fff; cursor: pointer; box-shadow: 0 2px 8px rgba(0,0,0,.25); }
    .panel { position: fixed; right: 20px; bottom: 76px; z-index: 2147483000; width: 360px; max-width: calc(100vw - 40px);
      height: 480px; max-height: calc(100vh - 100px); display: none; flex-direction: column; background: #fff; color: #111;
      border-radius: 12px; box-shadow: 0 4px 24px rgba(0,0,0,.3); overflow: hidden; }
    .panel.open { display: flex; }
    header { display: flex; justify-content: space-between; align-items: center; padding: 10px 14px; background: #2563eb; color: #fff; }
    header button { background: none; border: 0; color: #fff; cursor: pointer; font-size: 18px; }
    .log { flex: 1; overflow-y: auto; padding: 10px; }
    .msg { margin: 6px 0; padding: 8px 10px; border-radius: 8px; white-space: pre-wrap; word-wrap: break-word; }
    .user { background: #dbeafe; margin-left: 40px; }
    .assistant { background: #f3f4f6; margin-right: 20px; }
    .cite { color: #2563eb; font-size: 11px; vertical-align: super; }
    .sources { margin-top: 6px; font-size: 12px; color: #374151; }
    .sources li { margin: 2px 0; }
    form { display: flex; gap: 6px; padding: 8px; border-top: 1px solid #e5e7eb; }
    textarea { flex: 1; resize: none; height: 40px; padding: 6px; border: 1px solid #d1d5db; border-radius: 6px; }
    form button { border: 0; border-radius: 6px; padding: 0 12px; background: #2563eb; color: #fff; cursor: pointer; }
    form button.stop { background: #dc2626; }
  `;
  const el = (tag, cls, txt) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (txt != null) e.textContent = txt;
    return e;
  };
  const launcher = el("button", "launcher", text.open);
  launcher.type = "button";
  const panel = el("div", "panel");
  panel.setAttribute("role", "dialog");
  panel.setAttribute("aria-label", text.title);
  const header = el("header");
  header.append(el("span", "", text.title));
  const close = el("button", "", "×");
  close.type = "button";
  close.setAttribute("aria-label", text.close);
  header.append(close);
  const log = el("div", "log");
  log.setAttribute("aria-live", "polite");
  const form = el("form");
  const input = el("textarea");
  input.placeholder = text.placeholder;
  input.maxLength = 4000;
  const button = el("button", "send", text.send);
  button.type = "submit";
  form.append(input, button);
  panel.append(header, log, form);
  root.append(style, launcher, panel);

  launcher.addEventListener("click", () => { panel.classList.toggle("open"); if (panel.classList.contains("open")) input.focus(); });
  close.addEventListener("click", () => panel.classList.remove("open"));
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey && !e.isComposing) { e.preventDefault(); form.requestSubmit(); }
  });

  const history = []; // {role, content}: the widget keeps the conversation
  let running = null; // {taskId, abort}

  const api = (path) => `${base}/api/v1/widget${path}?key=${encodeURIComponent(key)}`;
  const headers = { "Content-Type": "application/json", "X-Widget-Visitor": visitor };

  // render writes an answer with its [n] citations marked and linked to
  // the numbered sources.
  const render = (box, answer, sources) => {
    box.textContent = "";
    const byIndex = new Map(sources.map((s) => [s.index, s]));
    let last = 0;
    for (const m of answer.matchAll(/\[(\d+)\]/g)) {
      const src = byIndex.get(Number(m[1]));
      if (!src) continue;
      box.append(answer.slice(last, m.index));
      const c = el("span", "cite", `[${m[1]}]`);
      c.title = src.documentName || "";
      box.append(c);
      last = m.index + m[0].length;
    }
    box.append(answer.slice(last));
    if (sources.length) {
      const list = el("ol", "sources");
      list.setAttribute("aria-label", text.sources);
      for (const s of sources) {
        const li = el("li", "", s.documentName || "");
        li.value = s.index;
        list.append(li);
      }
      box.append(list);
    }
  };

  const setRunning = (r) => {
    running = r;
    button.textContent = r ? text.stop : text.send;
    button.classList.toggle("stop", !!r);
    button.type = r ? "button" : "submit";
  };
  button.addEventListener("click", () => {
    if (!running) return;
    if (running.taskId) {
      fetch(api(`/chat/tasks/${running.taskId}/stop`), { method: "POST", headers, body: "{}" }).catch(() => {});
    } else {
      running.abort.abort();
    }
  });

  // refusal names what a refused status means to the visitor.
  const refusal = (status) =>
    status === 429 ? text.busy : status === 403 ? text.refused : status === 401 ? text.revoked : text.failed;

  // probe tells why a chat failed before any answer: a page the key does
  // not serve has its preflight refused, which the browser reports as a
  // bare network error. A simple request (no custom header, no body) needs
  // no preflight and its refusal is readable, so it says "not allowed"
  // (403) or "revoked" (401); it never chats, since it names no visitor.
  const probe = async () => {
    try {
      const resp = await fetch(api("/chat"), { method: "POST" });
      return resp.status === 403 || resp.status === 401 ? resp.status : 0;
    } catch {
      return 0;
    }
  };

  const ask = async (question) => {
    log.append(el("div", "msg user", question));
    const box = el("div", "msg assistant", "…");
    box.dataset.state = "streaming";
    log.append(box);
    log.scrollTop = log.scrollHeight;
    const abort = new AbortController();
    setRunning({ taskId: "", abort });
    let answer = "", sources = [], note = "";
    try {
      const resp = await fetch(api("/chat"), {
        method: "POST", headers, signal: abort.signal,
        body: JSON.stringify({ question, history: history.slice(-20) }),
      });
      if (!resp.ok) {
        box.textContent = refusal(resp.status);
        box.dataset.state = "refused";
        return;
      }
      const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let cut;
        while ((cut = buf.indexOf("\n\n")) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let name = "message", data = "";
          for (const line of block.split("\n")) {
            if (line.startsWith("event:")) name = line.slice(6).trim();
            else if (line.startsWith("data:")) data += line.slice(5).trim();
          }
          if (!data || name === "done") continue;
          let d;
          try { d = JSON.parse(data); } catch { continue; }
          if (name === "meta") running.taskId = d.taskId;
          else if (name === "sources") sources = d.sources || [];
          else if (name === "message" && d.type === "response") answer += d.delta;
          else if (name === "reject") note = text.busy;
          else if (name === "error") note = text.failed;
          else if (name === "cancel") note = text.stopped;
          render(box, answer + (note ? (answer ? "\n" : "") + note : ""), sources);
          log.scrollTop = log.scrollHeight;
        }
      }
      if (answer) history.push({ role: "user", content: question }, { role: "assistant", content: answer });
      box.dataset.state = note === text.stopped ? "stopped" : note ? "failed" : "done";
    } catch {
      const status = !answer && !abort.signal.aborted ? await probe() : 0;
      if (status) {
        box.textContent = refusal(status);
        box.dataset.state = "refused";
      } else {
        render(box, answer + (answer ? "\n" : "") + (abort.signal.aborted ? text.stopped : text.failed), sources);
        box.dataset.state = "failed";
      }
    } finally {
      setRunning(null);
    }
  };

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    const q = input.value.trim();
    if (!q || running) return;
    input.value = "";
    ask(q);
  });

  (document.body || document.documentElement).append(host);
})();
