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


def encode_stories(tok, stories, max_len=512):
    """llama2.c encode (BOS + dummy space), truncated to max_len tokens."""
    return [tok.encode(s)[:max_len] for s in stories]
