"""Drives ragent's OpenAI-compatible API with the official `openai` SDK.

Run by TestOpenAIOfficialClients (cmd/ragent/openai_clients_test.go) against
a running instance; exits non-zero on the first failed check.

    RAGENT_URL=http://127.0.0.1:8080 RAGENT_KEY=rk_... RAGENT_MODEL=ragent/kb python client.py ok|busy
"""
import os
import sys

import openai

base = os.environ["RAGENT_URL"] + "/v1"
key = os.environ["RAGENT_KEY"]
model = os.environ["RAGENT_MODEL"]
mode = sys.argv[1]
client = openai.OpenAI(base_url=base, api_key=key, max_retries=0, timeout=60)


def check(cond, what):
    if not cond:
        print(f"python openai {openai.__version__}: FAILED: {what}", file=sys.stderr)
        sys.exit(1)


def extra(obj, name):
    """An extension field: pydantic keeps unknown fields as extras."""
    return (obj.model_extra or {}).get(name)


QUESTION = [{"role": "user", "content": "How do I connect to the VPN?"}]
ANSWER = "Hello from the model [1]."

if mode == "ok":
    ids = [m.id for m in client.models.list()]
    check("ragent" in ids and model in ids, f"models {ids}")

    # Non-stream.
    r = client.chat.completions.create(model=model, messages=QUESTION)
    msg = r.choices[0].message
    check(msg.role == "assistant" and msg.content == ANSWER, f"content {msg.content!r}")
    check(r.choices[0].finish_reason == "stop", f"finish {r.choices[0].finish_reason}")
    sources = extra(msg, "sources")
    check(sources and sources[0]["document_name"] == "vpn.md" and sources[0]["index"] == 1, f"sources {sources}")
    check(r.usage.total_tokens > 0 and r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens, f"usage {r.usage}")

    # Stream with usage.
    text, final, usage = "", None, None
    for chunk in client.chat.completions.create(model=model, messages=QUESTION, stream=True,
                                                stream_options={"include_usage": True}):
        if chunk.usage is not None:
            usage = chunk.usage
        for ch in chunk.choices:
            text += ch.delta.content or ""
            if ch.finish_reason:
                final = ch
    check(text == ANSWER, f"streamed {text!r}")
    check(final is not None and final.finish_reason == "stop", "no final chunk")
    sources = extra(final.delta, "sources")
    check(sources and sources[0]["document_name"] == "vpn.md", f"stream sources {sources}")
    check(usage is not None and usage.total_tokens > 0, f"stream usage {usage}")

    # The conversation so far, with a system message and text parts.
    r = client.chat.completions.create(model="ragent", messages=[
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "How do I connect to the VPN?"}]},
        {"role": "assistant", "content": ANSWER},
        {"role": "user", "content": "And then?"},
    ])
    check(r.choices[0].message.content, "follow-up answered")

    # An unknown model is 404 model_not_found, stream or not.
    for stream in (False, True):
        try:
            client.chat.completions.create(model="ragent/no-such-kb", messages=QUESTION, stream=stream)
            check(False, "unknown model accepted")
        except openai.NotFoundError as e:
            check(e.status_code == 404 and e.code == "model_not_found", f"404 {e.code} {e.body}")

    # A bad key is 401.
    try:
        openai.OpenAI(base_url=base, api_key="rk_wrong", max_retries=0).models.list()
        check(False, "bad key accepted")
    except openai.AuthenticationError as e:
        check(e.status_code == 401, f"401 {e}")
elif mode == "busy":
    # The caller's share of the queue is full: 429 with Retry-After before
    # any stream, which the SDK would retry (max_retries=0 here).
    for stream in (False, True):
        try:
            client.chat.completions.create(model=model, messages=QUESTION, stream=stream)
            check(False, f"busy stream={stream} accepted")
        except openai.RateLimitError as e:
            check(e.status_code == 429 and e.code == "busy" and e.response.headers.get("retry-after"),
                  f"429 {e.code} {dict(e.response.headers)}")
else:
    check(False, f"unknown mode {mode}")
print(f"python openai {openai.__version__}: {mode} ok")
