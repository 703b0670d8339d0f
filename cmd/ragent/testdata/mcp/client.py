"""Drives ragent's MCP server (/mcp) with the official Python SDK (PyPI
`mcp`), code nobody here wrote: cmd/ragent/mcp_clients_test.go runs it with
RAGENT_URL, the keys and the ids of the fixture in the environment, and a
failed check exits non-zero."""

import asyncio
import contextlib
import os
import sys

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

URL = os.environ["RAGENT_URL"]
ENDPOINT = URL + "/mcp"


def check(ok, what):
    if not ok:
        sys.exit("FAILED: " + what)


@contextlib.asynccontextmanager
async def connect(key):
    headers = {"Authorization": "Bearer " + key} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        async with streamable_http_client(ENDPOINT, http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def text(result):
    return "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")


def refused(result, code, what):
    check(result.is_error and text(result).startswith(code + ":"), f"{what}: want a {code} tool error, got {result}")


async def main():
    kb, other, other_chunk = os.environ["RAGENT_KB"], os.environ["RAGENT_OTHER_KB"], os.environ["RAGENT_OTHER_CHUNK"]
    async with connect(os.environ["RAGENT_KEY"]) as s:
        tools = sorted(t.name for t in (await s.list_tools()).tools)
        check(tools == ["ask", "get_chunk", "get_document", "list_knowledge_bases", "search"], f"tools {tools}")

        kbs = (await s.call_tool("list_knowledge_bases", {})).structured_content["knowledgeBases"]
        check([k["id"] for k in kbs] == [kb], f"knowledge bases {kbs}, want only {kb}")

        found = await s.call_tool("search", {"query": "VPN GlobalProtect", "mode": "keyword", "topK": 3})
        hits = found.structured_content["results"]
        check(not found.is_error and hits and hits[0]["documentName"] == "vpn.md", f"search {found}")
        check(hits[0]["link"].startswith(URL + "/api/v1/documents/"), f"link {hits[0]['link']}")
        chunk = (await s.call_tool("get_chunk", {"chunkId": hits[0]["chunkId"]})).structured_content
        check("GlobalProtect" in chunk["content"], f"chunk {chunk}")

        progress = []

        async def on_progress(value, total, message):
            progress.append((value, message))

        asked = await s.call_tool("ask", {"question": "How do I connect to the VPN?"}, progress_callback=on_progress)
        answer = asked.structured_content
        check(not asked.is_error and "[1]" in answer["answer"] and answer["sources"][0]["index"] == 1, f"ask {asked}")
        check("[1] vpn.md (" in text(asked), f"ask text {text(asked)!r}")
        check(progress and "".join(m or "" for _, m in progress).find(answer["answer"]) >= 0, f"progress {progress}")

        # Outside the key's knowledge bases: not found, on every path.
        refused(await s.call_tool("search", {"query": "salaries", "knowledgeBaseIds": [other]}), "not_found", "search outside the limit")
        refused(await s.call_tool("get_chunk", {"chunkId": other_chunk}), "not_found", "chunk outside the limit")
        refused(await s.call_tool("ask", {"question": "When are salaries paid?", "knowledgeBaseIds": [other]}), "not_found", "ask outside the limit")

    async with connect(os.environ["RAGENT_NOCHAT_KEY"]) as s:
        res = await s.call_tool("ask", {"question": "How do I connect to the VPN?"})
        refused(res, "forbidden", "ask without the chat scope")
        check("chat scope" in text(res), f"refusal {text(res)!r}")
        found = await s.call_tool("search", {"query": "VPN"})
        check(not found.is_error and found.structured_content["results"], f"search with the no-chat key {found}")

    # The unlimited key reads both knowledge bases: a page of one at a
    # time, following nextCursor, gets each once, in order.
    async with connect(os.environ["RAGENT_ALL_KEY"]) as s:
        ids, args = [], {"limit": 1}
        for _ in range(10):
            page = await s.call_tool("list_knowledge_bases", args)
            check(not page.is_error and len(page.structured_content["knowledgeBases"]) == 1, f"page {page}")
            ids += [k["id"] for k in page.structured_content["knowledgeBases"]]
            if "nextCursor" not in page.structured_content:
                break
            args = {"limit": 1, "cursor": page.structured_content["nextCursor"]}
        check(ids == [kb, other], f"paged knowledge bases {ids}, want {[kb, other]}")
        refused(await s.call_tool("list_knowledge_bases", {"cursor": "forged"}), "invalid", "a forged cursor")

    try:
        async with connect("rk_not-a-key") as s:
            await s.list_tools()
    except BaseException as e:  # the SDK raises inside its task group
        check("unauthenticated" in repr(e), f"bad key: {e!r}")
    else:
        check(False, "a bad key connected")
    print("python mcp: ok")


asyncio.run(main())
