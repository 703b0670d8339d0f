#!/usr/bin/env bash
# Both servers, as scripts/services.sh starts them (start_embedder_on):
# documents on 8765 at a lower CPU priority, questions on 8766. The
# container ends when either server does.
set -euo pipefail
venv=/opt/embedder
serve() {
	nice -n "$1" "$venv/bin/python" "$venv/app/server.py" --host 0.0.0.0 --port "$2" \
		--model-dir "$venv/model" --default-type query --threads "${EMBEDDER_THREADS:-2}" \
		--model-name multilingual-e5-small-q4-ort
}
serve "${EMBEDDER_DOCUMENT_NICE:-10}" 8765 &
serve 0 8766 &
trap 'kill $(jobs -p) 2>/dev/null; wait' TERM INT
wait -n
echo "ragent-embedder: a server exited" >&2
kill $(jobs -p) 2>/dev/null || true
exit 1
