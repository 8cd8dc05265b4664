#!/usr/bin/env python3
"""Loads HuggingFace folders that turnrl wrote (init-model, save_pretrained) with transformers and
prints what from_pretrained reports: missing, unexpected and mis-shaped tensors must all be empty,
the tokenizer must load and round-trip text, and a forward pass must give finite logits.

    python3 benchmarks/device/load_in_transformers.py FOLDER [FOLDER ...]

Exits 1 on any problem."""
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

TEXT = "def add(x, y):\n    return x + y  # 加法 ✓\n"


def check(folder):
    model, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v}
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    decoded = tokenizer.decode(ids[0], skip_special_tokens=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.no_grad():
        logits = model.to(device)(input_ids=ids.to(device)).logits
    finite = bool(torch.isfinite(logits).all())
    params = sum(p.numel() for p in model.parameters())
    ok = not problems and decoded == TEXT and finite
    print(f"{folder}: {type(model).__name__}, {params / 1e6:.1f} M parameters, loading problems {problems or 'none'}, "
          f"tokenizer round trip {'ok' if decoded == TEXT else repr(decoded)}, logits finite {finite}: "
          f"{'OK' if ok else 'FAILED'}")
    return ok


if __name__ == "__main__":
    results = [check(folder) for folder in sys.argv[1:]]
    sys.exit(0 if results and all(results) else 1)
