#!/usr/bin/env python3
"""Re-checks the tokenizer fixtures (tests/data/tokenizers/*.json) against the real HF libraries,
where the CPU tests can only use transformers.js's port: `tokenizers` for the encode corpus,
`transformers`' apply_chat_template for the chat renderings. Run on a machine that has
transformers and tokenizers installed (the GPU machine: transformers 5.x, tokenizers 0.2x) and the
tokenizer folders that scripts/setup.sh fetched (.deps/hf-tokenizers/{qwen3,llama3}); nothing is
downloaded.

    python3 benchmarks/device/check_tokenizers.py [--root .]

Prints one line per check and exits 1 on any difference. The C++ tokenizer equals the fixtures
(tests/model/test_bpe_tokenizer.cpp, test_hf_chat_tokenizer.cpp), so agreement here makes it equal
to `tokenizers` on the corpus.
"""
import argparse
import json
import sys
from pathlib import Path

from tokenizers import Tokenizer
from transformers import PreTrainedTokenizerFast

# The generator renders ChatML with Qwen2.5's template on the Qwen3 vocabulary.
QWEN25_TEMPLATE = "tests/data/tokenizers/qwen2.5_chat_template.jinja"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", default=".", help="repository root")
    root = Path(parser.parse_args().root)
    data = root / "tests/data/tokenizers"
    failures = 0

    encode = json.loads((data / "encode_fixtures.json").read_text())
    for name in ("qwen3", "llama3"):
        tok = Tokenizer.from_file(str(root / ".deps/hf-tokenizers" / name / "tokenizer.json"))
        bad = 0
        for case in encode["cases"]:
            ids = tok.encode(case["text"], add_special_tokens=False).ids
            if ids != case[name]:
                bad += 1
                if bad <= 5:
                    print(f"  {name}: {json.dumps(case['text'])}\n    fixture {case[name]}\n    tokenizers {ids}")
            back = tok.decode(ids, skip_special_tokens=False)
            if name == "llama3" and back != case["text"]:
                bad += 1
                print(f"  {name}: decode(encode(x)) != x for {json.dumps(case['text'])}")
        print(f"encode {name}: {len(encode['cases']) - bad}/{len(encode['cases'])} lines identical to tokenizers")
        failures += bad

    chat = json.loads((data / "chat_fixtures.json").read_text())
    fast = {name: PreTrainedTokenizerFast.from_pretrained(str(root / ".deps/hf-tokenizers" / name)) for name in ("qwen3", "llama3")}
    bad = 0
    for case in chat["cases"]:
        tok = fast[case["tokenizer"]]
        kwargs = {"enable_thinking": False} if case["template"] == "qwen3" else {}
        template = (root / QWEN25_TEMPLATE).read_text() if case["template"] == "chatml" else None
        text = tok.apply_chat_template(case["messages"], chat_template=template, tokenize=False, add_generation_prompt=True, **kwargs)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        if text != case["text"] or ids != case["ids"]:
            bad += 1
            print(f"  {case['template']}: {json.dumps(case['messages'])}\n    fixture {json.dumps(case['text'])}\n    transformers {json.dumps(text)}")
    print(f"chat: {len(chat['cases']) - bad}/{len(chat['cases'])} renderings identical to transformers")
    failures += bad
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
