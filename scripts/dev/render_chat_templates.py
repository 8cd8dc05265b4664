"""Renders HF chat templates exactly as transformers' apply_chat_template does (jinja2's sandboxed
environment with trim_blocks and lstrip_blocks, the tojson filter, raise_exception), for
scripts/dev/make_tokenizer_fixtures.mjs: transformers.js's own Jinja port cannot parse Qwen3's
template (`.split(...)[-1]`, `str.startswith`).

stdin: a JSON list of {"template", "messages", "variables"}; stdout: the JSON list of rendered strings.
Needs jinja2 (Debian: python3-jinja2; pip: jinja2), in the `python3` on PATH or in $PYTHON."""
import json
import sys

from jinja2.exceptions import TemplateError
from jinja2.sandbox import ImmutableSandboxedEnvironment


def raise_exception(message):
    raise TemplateError(message)


def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

jobs = json.load(sys.stdin)
out = [env.from_string(job["template"]).render(messages=job["messages"], **job["variables"]) for job in jobs]
json.dump(out, sys.stdout)
