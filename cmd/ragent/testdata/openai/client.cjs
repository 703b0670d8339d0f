// Drives ragent's OpenAI-compatible API with the official `openai` npm
// package. Run by TestOpenAIOfficialClients (cmd/ragent/openai_clients_test.go)
// against a running instance; exits non-zero on the first failed check.
//
// CommonJS, so NODE_PATH (the npm prefix scripts/services.sh installs into)
// finds the package; ES modules ignore NODE_PATH.
//
//   NODE_PATH=… RAGENT_URL=http://127.0.0.1:8080 RAGENT_KEY=rk_… RAGENT_MODEL=ragent/kb node client.cjs ok|busy
const OpenAI = require("openai");

const base = process.env.RAGENT_URL + "/v1";
const model = process.env.RAGENT_MODEL;
const mode = process.argv[2];
const client = new OpenAI({ baseURL: base, apiKey: process.env.RAGENT_KEY, maxRetries: 0, timeout: 60_000 });

function check(cond, what) {
  if (!cond) {
    console.error(`node openai ${OpenAI.VERSION ?? ""}: FAILED: ${what}`);
    process.exit(1);
  }
}

const QUESTION = [{ role: "user", content: "How do I connect to the VPN?" }];
const ANSWER = "Hello from the model [1].";

async function main() {

if (mode === "ok") {
  const ids = [];
  for await (const m of client.models.list()) ids.push(m.id);
  check(ids.includes("ragent") && ids.includes(model), `models ${ids}`);

  // Non-stream.
  const r = await client.chat.completions.create({ model, messages: QUESTION });
  const msg = r.choices[0].message;
  check(msg.role === "assistant" && msg.content === ANSWER, `content ${msg.content}`);
  check(r.choices[0].finish_reason === "stop", `finish ${r.choices[0].finish_reason}`);
  check(msg.sources?.[0]?.document_name === "vpn.md" && msg.sources[0].index === 1, `sources ${JSON.stringify(msg.sources)}`);
  check(r.usage.total_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, `usage ${JSON.stringify(r.usage)}`);

  // Stream with usage.
  let text = "", final = null, usage = null;
  const stream = await client.chat.completions.create({
    model, messages: QUESTION, stream: true, stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      text += ch.delta.content ?? "";
      if (ch.finish_reason) final = ch;
    }
  }
  check(text === ANSWER, `streamed ${text}`);
  check(final?.finish_reason === "stop", "no final chunk");
  check(final.delta.sources?.[0]?.document_name === "vpn.md", `stream sources ${JSON.stringify(final.delta)}`);
  check(usage?.total_tokens > 0, `stream usage ${JSON.stringify(usage)}`);

  // An unknown model is 404 model_not_found, stream or not.
  for (const s of [false, true]) {
    try {
      await client.chat.completions.create({ model: "ragent/no-such-kb", messages: QUESTION, stream: s });
      check(false, "unknown model accepted");
    } catch (e) {
      check(e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === "model_not_found", `404 ${e}`);
    }
  }
} else if (mode === "busy") {
  // The caller's share of the queue is full: 429 with Retry-After before any
  // stream, which the SDK would retry (maxRetries 0 here).
  for (const s of [false, true]) {
    try {
      await client.chat.completions.create({ model, messages: QUESTION, stream: s });
      check(false, `busy stream=${s} accepted`);
    } catch (e) {
      check(e instanceof OpenAI.RateLimitError && e.status === 429 && e.code === "busy" && e.headers?.get?.("retry-after"),
        `429 ${e} ${e.code}`);
    }
  }
} else {
  check(false, `unknown mode ${mode}`);
}
console.log(`node openai: ${mode} ok`);
}

main().catch((e) => {
  console.error(`node openai: FAILED: ${e.stack ?? e}`);
  process.exit(1);
});
