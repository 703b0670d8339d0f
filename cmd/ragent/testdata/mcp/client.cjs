// Drives ragent's MCP server (/mcp) with the official TypeScript SDK (npm
// @modelcontextprotocol/sdk), code nobody here wrote:
// cmd/ragent/mcp_clients_test.go runs it with RAGENT_URL, the keys and the
// ids of the fixture in the environment (NODE_PATH finds the SDK), and a
// failed check exits non-zero.
const { Client } = require('@modelcontextprotocol/sdk/client/index.js');
const { StreamableHTTPClientTransport } = require('@modelcontextprotocol/sdk/client/streamableHttp.js');

const env = process.env;
const url = env.RAGENT_URL;

function check(ok, what) {
  if (!ok) {
    console.error('FAILED: ' + what);
    process.exit(1);
  }
}

async function connect(key) {
  const client = new Client({ name: 'ragent-test', version: '1' });
  const transport = new StreamableHTTPClientTransport(new URL(url + '/mcp'), {
    requestInit: { headers: { Authorization: 'Bearer ' + key } },
  });
  await client.connect(transport);
  return client;
}

const text = (res) => res.content.filter((c) => c.type === 'text').map((c) => c.text).join('\n');

function refused(res, code, what) {
  check(res.isError && text(res).startsWith(code + ':'), `${what}: want a ${code} tool error, got ${JSON.stringify(res)}`);
}

async function main() {
  const s = await connect(env.RAGENT_KEY);
  const tools = (await s.listTools()).tools.map((t) => t.name).sort();
  check(JSON.stringify(tools) === JSON.stringify(['ask', 'get_chunk', 'get_document', 'list_knowledge_bases', 'search']), `tools ${tools}`);

  const kbs = (await s.callTool({ name: 'list_knowledge_bases', arguments: {} })).structuredContent.knowledgeBases;
  check(kbs.length === 1 && kbs[0].id === env.RAGENT_KB, `knowledge bases ${JSON.stringify(kbs)}`);

  const found = await s.callTool({ name: 'search', arguments: { query: 'VPN GlobalProtect', mode: 'keyword', topK: 3 } });
  const hits = found.structuredContent.results;
  check(!found.isError && hits.length > 0 && hits[0].documentName === 'vpn.md', `search ${JSON.stringify(found)}`);
  check(hits[0].link.startsWith(url + '/api/v1/documents/'), `link ${hits[0].link}`);
  const doc = (await s.callTool({ name: 'get_document', arguments: { documentId: hits[0].documentId } })).structuredContent;
  check(doc.name === 'vpn.md' && doc.chunks.length === doc.chunkCount, `document ${JSON.stringify(doc)}`);

  const progress = [];
  const asked = await s.callTool({ name: 'ask', arguments: { question: 'How do I connect to the VPN?' } }, undefined, {
    onprogress: (p) => progress.push(p),
  });
  const answer = asked.structuredContent;
  check(!asked.isError && answer.answer.includes('[1]') && answer.sources[0].index === 1, `ask ${JSON.stringify(asked)}`);
  check(text(asked).includes('[1] vpn.md ('), `ask text ${text(asked)}`);
  check(progress.map((p) => p.message || '').join('').includes(answer.answer), `progress ${JSON.stringify(progress)}`);

  // Outside the key's knowledge bases: not found, on every path.
  refused(await s.callTool({ name: 'search', arguments: { query: 'salaries', knowledgeBaseIds: [env.RAGENT_OTHER_KB] } }), 'not_found', 'search outside the limit');
  refused(await s.callTool({ name: 'get_chunk', arguments: { chunkId: env.RAGENT_OTHER_CHUNK } }), 'not_found', 'chunk outside the limit');
  refused(await s.callTool({ name: 'ask', arguments: { question: 'When are salaries paid?', knowledgeBaseIds: [env.RAGENT_OTHER_KB] } }), 'not_found', 'ask outside the limit');
  await s.close();

  const n = await connect(env.RAGENT_NOCHAT_KEY);
  const res = await n.callTool({ name: 'ask', arguments: { question: 'How do I connect to the VPN?' } });
  refused(res, 'forbidden', 'ask without the chat scope');
  check(text(res).includes('chat scope'), `refusal ${text(res)}`);
  const nf = await n.callTool({ name: 'search', arguments: { query: 'VPN' } });
  check(!nf.isError && nf.structuredContent.results.length > 0, `search with the no-chat key ${JSON.stringify(nf)}`);
  await n.close();

  // The unlimited key reads both knowledge bases: a page of one at a time,
  // following nextCursor, gets each once, in order.
  const all = await connect(env.RAGENT_ALL_KEY);
  const ids = [];
  let args = { limit: 1 };
  for (let i = 0; i < 10; i++) {
    const page = await all.callTool({ name: 'list_knowledge_bases', arguments: args });
    check(!page.isError && page.structuredContent.knowledgeBases.length === 1, `page ${JSON.stringify(page)}`);
    ids.push(...page.structuredContent.knowledgeBases.map((k) => k.id));
    if (page.structuredContent.nextCursor === undefined) break;
    args = { limit: 1, cursor: page.structuredContent.nextCursor };
  }
  check(JSON.stringify(ids) === JSON.stringify([env.RAGENT_KB, env.RAGENT_OTHER_KB]), `paged knowledge bases ${ids}`);
  refused(await all.callTool({ name: 'list_knowledge_bases', arguments: { cursor: 'forged' } }), 'invalid', 'a forged cursor');
  await all.close();

  let err;
  try {
    await connect('rk_not-a-key');
  } catch (e) {
    err = e;
  }
  check(err && /401|unauthenticated/i.test(String(err)), `bad key: ${err}`);
  console.log('typescript mcp: ok');
}

main().catch((e) => {
  console.error('FAILED:', e);
  process.exit(1);
});
