#!/bin/bash
# Measurement only (issue 27): `duplicates` over a temporary copy of the
# checkout in which every Go `import ( ... )` block is one `import "x"` line
# a package. The tool passes over `import "x"` lines but not the bare strings
# inside a block, so two files importing six or more of the same packages
# count as a pair; this shows the rest. The tree itself is not changed.
# usage: scripts/duplicates-without-imports.sh [duplicates args...]
set -euo pipefail
dst=$(mktemp -d)
trap 'rm -rf "$dst"' EXIT
git ls-files -co --exclude-standard -z | python3 -c '
import os, re, shutil, sys
dst = sys.argv[1]
for f in sys.stdin.read().split("\0"):
    if not f or not os.path.isfile(f) or os.path.islink(f):
        continue
    q = os.path.join(dst, f)
    os.makedirs(os.path.dirname(q), exist_ok=True)
    if not f.endswith(".go"):
        shutil.copyfile(f, q)
        continue
    text = open(f, encoding="utf-8", errors="replace").read()
    one = lambda m: "\n".join("import " + s.strip() for s in m.group(1).split("\n")
                              if s.strip() and not s.strip().startswith("//"))
    open(q, "w").write(re.sub(r"(?ms)^import \(\n(.*?)\n\)", one, text))
' "$dst"
duplicates --repo "$dst" --seconds 300 --most 200 "$@" | sed "s#$dst/##g"
