"""The MemoryProjector, exactly per docs/contracts.md ("The MemoryProjector files"):

  X = concat(mem, H')   (H' = H, or in_proj(H) when input_layers == 3; X = H' if no mem)
  m = queries + CrossAttn(LN_q(queries), LN_x(X))
  m = m + SelfAttn(LN_self(m))
  m = m + FFN(LN_ffn(m)),  FFN(z) = down(GELU_erf(up(z)))
  out = LN_out(m)

Attention: num_heads heads of head_dim = d / num_heads, scores / sqrt(head_dim), softmax over
all keys (no mask), heads concatenated, then the o projection. Everything fp32.
Files: projector.json + projector.safetensors (tensor names as in docs/contracts.md).
"""
import hashlib
import json
import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from . import safetensors_io


class _Attn(nn.Module):
    def __init__(self, d, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.q = nn.Linear(d, d)
        self.k = nn.Linear(d, d)
        self.v = nn.Linear(d, d)
        self.o = nn.Linear(d, d)

    def forward(self, xq, xkv):
        B, Tq, d = xq.shape
        Tk = xkv.shape[1]
        h = self.num_heads
        hd = d // h
        q = self.q(xq).view(B, Tq, h, hd).transpose(1, 2)
        k = self.k(xkv).view(B, Tk, h, hd).transpose(1, 2)
        v = self.v(xkv).view(B, Tk, h, hd).transpose(1, 2)
        att = torch.softmax((q @ k.transpose(-1, -2)) / math.sqrt(hd), dim=-1)
        o = (att @ v).transpose(1, 2).reshape(B, Tq, d)
        return self.o(o)


class _FFN(nn.Module):
    def __init__(self, d, mult):
        super().__init__()
        self.up = nn.Linear(d, mult * d)
        self.down = nn.Linear(mult * d, d)

    def forward(self, z):
        return self.down(F.gelu(self.up(z)))  # erf GELU (torch default)


class MemoryKV(nn.Module):
    """Per-layer K/V of the memory rows (docs/memory-mode.md, "Per-layer memory K/V"):
    layer l's cached key and value of memory slot j get + k[l](z_j) and + v[l](z_j), where
    z = mem (hidden 0) or GELU_erf(up(mem)) (hidden H > 0). Keys in the model's
    rotate_half (HF) head layout, un-rotated (memory sits at position 0). The output maps
    start at zero, so a projector without trained maps is exactly the plain one."""

    def __init__(self, d, num_layers, kv_dim, hidden=0):
        super().__init__()
        if hidden:
            self.up = nn.Linear(d, hidden)
        n = hidden or d
        self.k = nn.ModuleList(nn.Linear(n, kv_dim) for _ in range(num_layers))
        self.v = nn.ModuleList(nn.Linear(n, kv_dim) for _ in range(num_layers))
        with torch.no_grad():
            for lin in list(self.k) + list(self.v):
                lin.weight.zero_()
                lin.bias.zero_()

    def forward(self, mem):
        """mem [B, M, d] -> [(dk [B, M, kv_dim], dv [B, M, kv_dim]) per layer]."""
        z = F.gelu(self.up(mem)) if hasattr(self, "up") else mem
        return [(k(z), v(z)) for k, v in zip(self.k, self.v)]


class MemoryProjector(nn.Module):
    def __init__(self, mem_slots=16, hidden_size=64, num_heads=8, ffn_mult=4, chunk_size=32,
                 window_size=64, input_layers=1, ln_eps=1e-5, embed_rms=1.0, seed=0,
                 window_policy="growing", sink_tokens=0, prefix_gap=0, memory_only_window=0,
                 memory_kv_layers=0, memory_kv_dim=0, memory_kv_hidden=0):
        super().__init__()
        assert hidden_size % num_heads == 0
        assert input_layers in (1, 3)
        assert window_policy in ("growing", "sliding")
        self.config = {
            "format": "kvfold-projector", "version": 1, "mem_slots": mem_slots,
            "hidden_size": hidden_size, "num_heads": num_heads, "ffn_mult": ffn_mult,
            "chunk_size": chunk_size, "window_size": window_size,
            "input_layers": input_layers, "dtype": "f32", "ln_eps": ln_eps,
        }
        if window_policy != "growing":  # absent = growing (older files stay byte-identical)
            self.config["window_policy"] = window_policy
        if sink_tokens:  # absent = 0 (likewise)
            self.config["sink_tokens"] = sink_tokens
        if prefix_gap:  # absent = 0 (likewise)
            self.config["prefix_gap"] = prefix_gap
        assert 0 <= memory_only_window <= chunk_size
        if memory_only_window:  # absent = 0 (likewise)
            self.config["memory_only_window"] = memory_only_window
        if memory_kv_layers:  # absent = no per-layer memory K/V (likewise)
            assert memory_kv_dim > 0 and memory_kv_hidden >= 0
            self.config["memory_kv_layers"] = memory_kv_layers
            self.config["memory_kv_dim"] = memory_kv_dim
            self.config["memory_kv_hidden"] = memory_kv_hidden
        d = hidden_size
        g = torch.Generator().manual_seed(seed)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            self.queries = nn.Parameter(torch.randn(mem_slots, d, generator=g))
            if input_layers == 3:
                self.in_proj = nn.Linear(3 * d, d)
            self.ln_q = nn.LayerNorm(d, eps=ln_eps)
            self.ln_x = nn.LayerNorm(d, eps=ln_eps)
            self.cross = _Attn(d, num_heads)
            self.ln_self = nn.LayerNorm(d, eps=ln_eps)
            self.self_attn = _Attn(d, num_heads)
            self.ln_ffn = nn.LayerNorm(d, eps=ln_eps)
            self.ffn = _FFN(d, ffn_mult)
            self.ln_out = nn.LayerNorm(d, eps=ln_eps)
            if memory_kv_layers:
                self.mem_kv = MemoryKV(d, memory_kv_layers, memory_kv_dim, memory_kv_hidden)
        with torch.no_grad():
            # Memory vectors start at the scale of the token embeddings.
            self.ln_out.weight.fill_(embed_rms)

    @property
    def mem_slots(self):
        return self.config["mem_slots"]

    def memory_kv(self, mem):
        """The per-layer memory K/V additions for mem [B, M, d] (None without mem_kv or
        mem). fp32, like the projector."""
        if mem is None or not hasattr(self, "mem_kv"):
            return None
        with torch.autocast(mem.device.type, enabled=False):
            return self.mem_kv(mem.float())

    def forward(self, mem, hidden):
        """mem: [B, M, d] or None; hidden: [B, C, d * input_layers] -> [B, M, d]. Always
        fp32, also inside a bf16 autocast region (the engine's projector is fp32)."""
        with torch.autocast(hidden.device.type, enabled=False):
            return self._forward(None if mem is None else mem.float(), hidden.float())

    def _forward(self, mem, hidden):
        h = self.in_proj(hidden) if self.config["input_layers"] == 3 else hidden
        x = h if mem is None else torch.cat([mem, h], dim=1)
        q = self.queries.unsqueeze(0).expand(x.shape[0], -1, -1)
        m = q + self.cross(self.ln_q(q), self.ln_x(x))
        z = self.ln_self(m)
        m = m + self.self_attn(z, z)
        m = m + self.ffn(self.ln_ffn(m))
        return self.ln_out(m)

    # -- files ---------------------------------------------------------------------------
    def contract_state(self):
        """{contract tensor name: tensor}."""
        out = {}
        for k, v in self.state_dict().items():
            name = "self." + k[len("self_attn."):] if k.startswith("self_attn.") else k
            out[name] = v
        return out

    def save(self, out_dir, model_fingerprint):
        os.makedirs(out_dir, exist_ok=True)
        cfg = dict(self.config)
        cfg["model_fingerprint"] = model_fingerprint
        with open(os.path.join(out_dir, "projector.json"), "w") as f:
            json.dump(cfg, f, indent=2)
            f.write("\n")
        safetensors_io.save(os.path.join(out_dir, "projector.safetensors"), self.contract_state())

    @staticmethod
    def load(in_dir):
        with open(os.path.join(in_dir, "projector.json")) as f:
            cfg = json.load(f)
        if cfg.get("format") != "kvfold-projector" or cfg.get("version") != 1:
            raise ValueError(f"{in_dir}: not a kvfold-projector v1")
        p = MemoryProjector(cfg["mem_slots"], cfg["hidden_size"], cfg["num_heads"],
                            cfg["ffn_mult"], cfg["chunk_size"], cfg["window_size"],
                            cfg.get("input_layers", 1), cfg.get("ln_eps", 1e-5),
                            window_policy=cfg.get("window_policy", "growing"),
                            sink_tokens=cfg.get("sink_tokens", 0),
                            prefix_gap=cfg.get("prefix_gap", 0),
                            memory_only_window=cfg.get("memory_only_window", 0),
                            memory_kv_layers=cfg.get("memory_kv_layers", 0),
                            memory_kv_dim=cfg.get("memory_kv_dim", 0),
                            memory_kv_hidden=cfg.get("memory_kv_hidden", 0))
        p.config["model_fingerprint"] = cfg.get("model_fingerprint", "")
        tensors, _ = safetensors_io.load(os.path.join(in_dir, "projector.safetensors"))
        state = {}
        for k, v in tensors.items():
            state["self_attn." + k[5:] if k.startswith("self.") else k] = v
        p.load_state_dict(state, strict=True)
        return p


def projector_fingerprint(in_dir):
    """sha256 over projector.json bytes followed by projector.safetensors bytes (hex)."""
    h = hashlib.sha256()
    for name in ("projector.json", "projector.safetensors"):
        with open(os.path.join(in_dir, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()
