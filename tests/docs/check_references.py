#!/usr/bin/env python3
"""Docs that stand alone: every markdown link and file path in README.md and docs/*.md resolves
inside the repository (anchors included), and no document or public header cites material that
is not in it (research notes, DESIGN.md, issue numbers, section signs).
Usage: check_references.py REPO_DIR"""
import pathlib
import re
import sys

repo = pathlib.Path(sys.argv[1]).resolve()
docs = [repo / "README.md"] + sorted((repo / "docs").rglob("*.md"))
headers = sorted((repo / "include").rglob("*.h"))
problems = []

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# Repository paths mentioned in text: a top-level folder, then a file name with an extension.
PATH = re.compile(r"(?<![\w./-])((?:include|src|tests|docs|configs|examples|benchmarks|scripts|python|cmake|data|\.ci)"
                  r"/[\w./@+-]*\.(?:md|h|cuh|cpp|cu|yaml|py|sh|cmake|txt|png|jsonl|json))\b")
OUTSIDE = re.compile(r"research (?:§|notes|anchor)|shared/research|drkernel-algorithms\.md|kernelgym-env\.md|"
                     r"(?-i:DESIGN\.md)|§|\bissues? #?\d+", re.IGNORECASE)


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(md):
    return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", md.read_text(), re.MULTILINE)}


for doc in docs:
    text = doc.read_text()
    where = doc.relative_to(repo)
    in_code_block = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            in_code_block = not in_code_block
        for target in LINK.findall(line):
            if re.match(r"[a-z]+://|mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (doc.parent / path).resolve() if path else doc
            if not resolved.exists():
                problems.append(f"{where}:{number}: link to a missing file: {target}")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                problems.append(f"{where}:{number}: link to a missing heading: {target}")
        for path in PATH.findall(line):
            if "<" in path or "*" in path:
                continue
            if not (repo / path).exists() and not (doc.parent / path).exists():
                problems.append(f"{where}:{number}: names a file the repository lacks: {path}")
        if not in_code_block and OUTSIDE.search(line):
            problems.append(f"{where}:{number}: cites material outside the repository: {OUTSIDE.search(line).group(0)!r}")

for header in headers:
    for number, line in enumerate(header.read_text().splitlines(), 1):
        if OUTSIDE.search(line):
            problems.append(f"{header.relative_to(repo)}:{number}: cites material outside the repository: "
                            f"{OUTSIDE.search(line).group(0)!r}")

for p in problems:
    print(p)
print(f"checked {len(docs)} documents and {len(headers)} headers: {len(problems)} problem(s)")
sys.exit(1 if problems else 0)
