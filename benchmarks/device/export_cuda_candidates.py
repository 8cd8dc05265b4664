#!/usr/bin/env python3
"""Exports the CUDA candidates of tests/kernels/cuda_candidates.h to JSON.

Each entry of the header is `{"task", "kind", "expect", <raw string with delimiter cuda>}`: one raw string per
source, no concatenation, so a regular expression reads them back verbatim. Entries before
`cuda_failure_candidates()` are in the list "main", the ones after it in "failure". The form
("kernel" or "launcher") is the evaluator's rule: launcher when the comment-stripped source calls
`turnrl_launch(`.

    python3 benchmarks/device/export_cuda_candidates.py            # writes benchmarks/device/cuda_candidates.json
    python3 benchmarks/device/export_cuda_candidates.py --check    # exit 1 if the JSON is stale
    python3 benchmarks/device/export_cuda_candidates.py --out FILE [--header FILE]

Only the standard library; importable (load_candidates) by cuda_eval_baseline.py.
"""
import argparse
import json
import os
import re
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_HEADER = os.path.join(ROOT, "tests", "kernels", "cuda_candidates.h")
DEFAULT_JSON = os.path.join(ROOT, "benchmarks", "device", "cuda_candidates.json")

TASKS = ("relu_bias", "gelu_tanh", "swiglu", "softmax_rows", "layernorm_rows", "logsumexp_rows",
         "matmul_bias_relu", "matmul_softmax")
EXPECTS = {"correct", "lazy", "mismatch", "out_of_bounds", "deferred", "caches", "shape_specialisation",
           "precision", "mutates_inputs", "no_work", "tampering", "crash", "timeout", "compile", "launch_shape"}

_ENTRY = re.compile(r'\{\s*"([A-Za-z0-9_]+)"\s*,\s*"([A-Za-z0-9_]+)"\s*,\s*"([A-Za-z0-9_]+)"\s*,\s*'
                    r'R"cuda\((.*?)\)cuda"\s*\}', re.S)
_FAILURE_LIST = re.compile(r"cuda_failure_candidates\s*\(\s*\)\s*\{")


def strip_comments(text):
    out, i = [], 0
    while i < len(text):
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = len(text) if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            i = len(text) if j < 0 else j + 2
            out.append(" ")
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def candidate_form(source):
    return "launcher" if re.search(r"\bturnrl_launch\s*\(", strip_comments(source)) else "kernel"


def load_candidates(header=DEFAULT_HEADER):
    """The candidates of the header, in order: dicts with task, kind, expect, form, list, source."""
    with open(header, encoding="utf-8") as f:
        text = f.read()
    failure_at = _FAILURE_LIST.search(text)
    if not failure_at:
        raise SystemExit(f"{header}: no cuda_failure_candidates() definition found")
    out = []
    for m in _ENTRY.finditer(text):
        task, kind, expect, source = m.groups()
        if task not in TASKS:
            raise SystemExit(f"{header}: unknown task {task!r} (entry {kind!r})")
        if expect not in EXPECTS:
            raise SystemExit(f"{header}: unknown expect {expect!r} ({task}/{kind})")
        out.append({"task": task, "kind": kind, "expect": expect, "form": candidate_form(source),
                    "list": "failure" if m.start() > failure_at.start() else "main", "source": source})
    # Every raw string must have been matched as an entry: a malformed entry would be dropped silently.
    raw = len(re.findall(r'R"cuda\(', text))
    if raw != len(out):
        raise SystemExit(f"{header}: {raw} raw strings but {len(out)} parsed entries: an entry is malformed")
    if not out:
        raise SystemExit(f"{header}: no candidates found")
    return out


def to_json(candidates, header):
    doc = {"generated_from": os.path.relpath(header, ROOT), "generator": "benchmarks/device/export_cuda_candidates.py",
           "candidates": candidates}
    return json.dumps(doc, indent=1, sort_keys=False) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--header", default=DEFAULT_HEADER)
    ap.add_argument("--out", default=DEFAULT_JSON)
    ap.add_argument("--check", action="store_true", help="compare with --out instead of writing; exit 1 if stale")
    args = ap.parse_args()
    candidates = load_candidates(args.header)
    text = to_json(candidates, args.header)
    if args.check:
        try:
            with open(args.out, encoding="utf-8") as f:
                current = f.read()
        except FileNotFoundError:
            print(f"{args.out}: missing; run {sys.argv[0]} to generate it", file=sys.stderr)
            return 1
        if current != text:
            print(f"{args.out}: stale (the header changed); run {sys.argv[0]} to regenerate it", file=sys.stderr)
            return 1
        print(f"{args.out}: up to date ({len(candidates)} candidates)")
        return 0
    with open(args.out, "w", encoding="utf-8") as f:
        f.write(text)
    counts = {}
    for c in candidates:
        counts[c["list"]] = counts.get(c["list"], 0) + 1
    print(f"wrote {args.out}: {len(candidates)} candidates ({', '.join(f'{n} {k}' for k, n in counts.items())})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
