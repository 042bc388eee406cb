"""The names probe of `kvfold eval --recall` (docs/eval.md, "Recall probe") in Python.

A word is a maximal run of ASCII letters of the decoded text, compared case-insensitively;
it is a *name* when it starts upper-case, has 2+ letters and at least one occurrence is not
at a sentence start. Every token of an occurrence of a name is marked when the name
occurred earlier and all earlier occurrences ended before `j - window`: only a memory can
still carry it. Used by train.py to weight those targets (`--name-weight`) and to report
the names NLL of the validation split.
"""
import re

_WORD = re.compile(rb"[A-Za-z]+")


def _piece_bytes(tok, prev, t):
    if t in (0, 1, 2):  # <unk>, BOS, EOS: no text
        return b""
    return tok.decode_piece(prev, t)


def _at_sentence_start(text, begin):
    for i in range(begin, 0, -1):
        c = text[i - 1:i]
        if c == b"\n":
            return True
        if c in (b" ", b"\t", b'"', b"'", b"(", b"["):
            continue
        return c in (b".", b"!", b"?", b":", b";") or c.isdigit()
    return True


def names_mask(tok, ids, window):
    """[len(ids)] list of 0/1: token j belongs to a name whose earlier occurrences all
    lie outside the last `window` tokens before it."""
    n = len(ids)
    text = bytearray()
    owner = []
    prev = 1
    for j, t in enumerate(ids):
        b = _piece_bytes(tok, prev, t)
        prev = t
        text += b
        owner += [j] * len(b)
    text = bytes(text)
    words = []
    for m in _WORD.finditer(text):
        s, e = m.span()
        name_use = text[s:s + 1].isupper() and e - s >= 2 and not _at_sentence_start(text, s)
        words.append((s, e, text[s:e].lower(), name_use))
    names = {k for _, _, k, use in words if use}
    out = [0] * n
    last_end = {}
    for s, e, key, _ in words:
        first_tok, last_tok = owner[s], owner[e - 1]
        if key in names and key in last_end:
            for j in range(max(first_tok, 1), last_tok + 1):
                if last_end[key] < j - window:
                    out[j] = 1
        last_end[key] = last_tok
    return out
