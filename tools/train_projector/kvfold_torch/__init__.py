"""kvfold_torch: an independent PyTorch (fp32) reference for kvfold.

Modules:
  safetensors_io  minimal safetensors reader/writer (no external package).
  llama           Llama-family model (HF directories and llama2.c checkpoints).
  tokenizer       llama2.c tokenizer.bin encode/decode.
  projector       the MemoryProjector (docs/memory-mode.md, docs/contracts.md).
  memory          memory-mode student (teacher-forced segments) and window modes.
  probe           the names probe of `kvfold eval --recall` (training weights, validation).
"""
