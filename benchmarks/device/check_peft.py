#!/usr/bin/env python3
"""LoRA adapters that turnrl saved (peft layout) against peft itself: each folder is loaded with
PeftModel.from_pretrained over the base checkpoint, and peft's logits must equal the logits turnrl
computed for the same prompt (turnrl_logits.safetensors in the folder) to 1e-4 in float32.

    TURNRL_PEFT_EXPORT=DIR build/bin/test_model "lora: peft names*"   # writes DIR/llama-lora, DIR/llama-rslora
    python3 benchmarks/device/check_peft.py BASE DIR/llama-lora DIR/llama-rslora

BASE is the base folder the adapters were trained on (tests/data/hf/llama for the test's). Exits 1
on any difference or loading problem."""
import json
import sys

import torch
from peft import PeftModel
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM


def check(base, folder):
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    config = json.load(open(folder + "/adapter_config.json"))
    model = PeftModel.from_pretrained(model, folder)
    model.eval()
    ref = load_file(folder + "/turnrl_logits.safetensors")
    ids = ref["prompt"].round().long().unsqueeze(0)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0].float()
    with model.disable_adapter(), torch.no_grad():
        base_logits = model(input_ids=ids).logits[0].float()
    diff = (logits - ref["logits"]).abs().max().item()
    moved = (base_logits - ref["logits"]).abs().max().item()
    ok = diff <= 1e-4 and moved > 1e-2
    print(f"{folder}: r {config['r']}, alpha {config['lora_alpha']}, rslora {config['use_rslora']}, "
          f"{len(config['target_modules'])} target modules: max |peft - turnrl| {diff:.3g} "
          f"(adapters move the logits by {moved:.3g}): {'OK' if ok else 'FAILED'}")
    return ok


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    results = [check(sys.argv[1], folder) for folder in sys.argv[2:]]
    sys.exit(0 if all(results) else 1)
