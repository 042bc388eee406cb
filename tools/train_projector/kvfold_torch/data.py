"""Text corpora: TinyStories sample splitting and tokenization (cached per process)."""


def read_stories(path):
    """Stories of tinystories_train_sample.txt, each stripped of surrounding whitespace
    (separated by lines `<|endoftext|>`; empty pieces dropped)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    return [s.strip() for s in text.split("<|endoftext|>") if s.strip()]


def split_train_heldout(stories, heldout=200):
    """The LAST `heldout` stories are the evaluation set; training never sees them."""
    return stories[:-heldout], stories[-heldout:]


def encode_stories(tok, stories, max_len=512, cache=""):
    """llama2.c encode (BOS + dummy space), truncated to max_len tokens. cache: a JSON file
    reused when it holds the same stories' encodings (keyed by a hash of the texts,
    max_len and the tokenizer's pieces; encoding 2,000 stories in Python costs more than a few training steps)."""
    import hashlib
    import json
    import os
    h = hashlib.sha256(json.dumps([max_len, stories]).encode())
    for piece in getattr(tok, "pieces", [getattr(tok, "path", "")]):  # the tokenizer too
        h.update(piece if isinstance(piece, bytes) else piece.encode())
    key = h.hexdigest()
    if cache and os.path.exists(cache):
        with open(cache) as f:
            c = json.load(f)
        if c.get("key") == key:
            return c["ids"]
    ids = [tok.encode(s)[:max_len] for s in stories]
    if cache:
        with open(cache + ".tmp", "w") as f:
            json.dump({"key": key, "ids": ids}, f)
        os.replace(cache + ".tmp", cache)
    return ids


def iter_documents(paths, sep="<|endoftext|>", max_chars=8192, block=1 << 20):
    """Streams the documents of text files in order without reading a file whole: pieces
    between `sep` markers, stripped, empty ones dropped; a piece longer than max_chars is
    cut into pieces of max_chars (a book becomes many training documents)."""
    for path in paths:
        buf = ""
        with open(path, encoding="utf-8") as f:
            while True:
                chunk = f.read(block)
                buf += chunk
                parts = buf.split(sep)
                buf = parts.pop() if chunk else ""
                for p in parts:
                    p = p.strip()
                    for i in range(0, len(p), max_chars):
                        yield p[i:i + max_chars]
                if not chunk:
                    break


class StreamBatches:
    """Batches of encoded documents from text streamed through `iter_documents`, endlessly
    (the files are re-read each pass). Documents go through a shuffle buffer of `buffer`
    raw texts drawn by a generator seeded with `seed` and are encoded only when drawn, so
    the corpus may be far larger than memory; `draws` counts the documents drawn so far and
    `skip(draws)` (resume) replays them without encoding. Documents with fewer than
    `min_len` tokens are skipped."""

    def __init__(self, paths, encode, batch, max_len, min_len, seed, buffer=4096,
                 skip_docs=0):
        import random
        self.paths, self.encode, self.batch = paths, encode, batch
        self.max_len, self.min_len = max_len, min_len
        self.rng = random.Random(seed)
        self.buffer = buffer
        self.pool = []
        self.draws = 0
        self.stream = self._endless(skip_docs)

    def _endless(self, skip_docs):
        while True:
            n = 0
            for d in iter_documents(self.paths):
                n += 1
                if n > skip_docs:  # the first skip_docs documents are the validation split
                    yield d
            if n <= skip_docs:
                raise ValueError("the stream has no training documents")

    def _draw(self):
        while len(self.pool) < self.buffer:
            self.pool.append(next(self.stream))
        i = self.rng.randrange(len(self.pool))
        self.pool[i], self.pool[-1] = self.pool[-1], self.pool[i]
        self.draws += 1
        return self.pool.pop()

    def skip(self, draws):
        while self.draws < draws:
            self._draw()

    def next_batch(self):
        docs = []
        while len(docs) < self.batch:
            ids = self.encode(self._draw())[:self.max_len]
            if len(ids) >= self.min_len:
                docs.append(ids)
        return docs
