"""llama2.c tokenizer.bin (e.g. tok512.bin): encode and decode exactly as llama2.c's run.c.

File: int32 max_token_length, then per piece: float32 score, int32 length, bytes.
encode: optional BOS (1), a dummy leading space piece when the text is non-empty, one piece
per UTF-8 code point (unknown ones fall back to their bytes, id = byte + 3), then repeated
merging of the adjacent pair whose concatenation is a piece with the best score.
"""
import struct


class Llama2cTokenizer:
    def __init__(self, path: str):
        with open(path, "rb") as f:
            data = f.read()
        self.max_token_length = struct.unpack("<i", data[:4])[0]
        pos = 4
        self.pieces = []
        self.scores = []
        while pos < len(data):
            score, n = struct.unpack("<fi", data[pos:pos + 8])
            pos += 8
            self.pieces.append(data[pos:pos + n])
            pos += n
            self.scores.append(score)
        self.lookup = {}
        for i, p in enumerate(self.pieces):
            self.lookup.setdefault(p, i)
        self.vocab_size = len(self.pieces)

    def encode(self, text: str, bos=True, eos=False, dummy_prefix=True):
        ids = []
        if bos:
            ids.append(1)
        if text and dummy_prefix:
            ids.append(self.lookup[b" "])
        for ch in text:
            b = ch.encode("utf-8")
            i = self.lookup.get(b)
            if i is not None:
                ids.append(i)
            else:
                ids.extend(x + 3 for x in b)
        start = 1 if bos else 0
        toks = ids[start:]
        while True:
            best, best_id, best_i = -1e10, -1, -1
            for i in range(len(toks) - 1):
                j = self.lookup.get(self.pieces[toks[i]] + self.pieces[toks[i + 1]])
                if j is not None and self.scores[j] > best:
                    best, best_id, best_i = self.scores[j], j, i
            if best_i < 0:
                break
            toks[best_i:best_i + 2] = [best_id]
        out = ids[:start] + toks
        if eos:
            out.append(2)
        return out

    def decode_piece(self, prev: int, tok: int) -> bytes:
        p = self.pieces[tok]
        if prev == 1 and p.startswith(b" "):
            p = p[1:]
        if len(p) == 6 and p.startswith(b"<0x") and p.endswith(b">"):
            try:
                return bytes([int(p[3:5], 16)])
            except ValueError:
                pass
        return p

    def decode(self, ids, prev=1) -> str:
        out = b""
        for t in ids:
            out += self.decode_piece(prev, t)
            prev = t
        return out.decode("utf-8", errors="replace")
