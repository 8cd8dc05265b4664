#include "bpe_pre_tokenizer.h"

#include <algorithm>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "bpe_byte_level.h"

namespace turnrl::detail {

namespace {

// GPT-2's pre-tokenizer regex, which HF's ByteLevel applies when use_regex is true.
constexpr const char* kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

pcre2_code* code_of(const std::shared_ptr<void>& p) { return static_cast<pcre2_code*>(p.get()); }

using Span = std::pair<size_t, size_t>;
struct Part {
  Span span;
  bool is_match;
};

// HF's SplitDelimiterBehavior applied to the whole string's [match / not-match] cover.
std::vector<Span> apply_behavior(const std::vector<Part>& parts, BpePreTokenizer::Behavior behavior) {
  using B = BpePreTokenizer::Behavior;
  std::vector<Span> out;
  switch (behavior) {
    case B::isolated:
      for (const Part& p : parts) out.push_back(p.span);
      break;
    case B::removed:
      for (const Part& p : parts)
        if (!p.is_match) out.push_back(p.span);
      break;
    case B::merged_with_previous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !out.empty()) out.back().second = p.span.second;
        else out.push_back(p.span);
        previous_match = p.is_match;
      }
      break;
    }
    case B::merged_with_next: {
      bool previous_match = false;  // of the part to the right
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !previous_match && !out.empty()) out.back().first = it->span.first;
        else out.push_back(it->span);
        previous_match = it->is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
    case B::contiguous: {
      bool previous_match = false;
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !out.empty()) out.back().second = p.span.second;
        else out.push_back(p.span);
        previous_match = p.is_match;
      }
      break;
    }
  }
  return out;
}

std::vector<Span> split(const BpeRegex& regex, std::string_view text, BpePreTokenizer::Behavior behavior, bool invert) {
  std::vector<Part> parts;
  size_t previous = 0;
  for (const Span& m : regex.find_all(text)) {
    if (m.first > previous) parts.push_back({{previous, m.first}, invert});
    parts.push_back({m, !invert});
    previous = m.second;
  }
  if (previous < text.size()) parts.push_back({{previous, text.size()}, invert});
  std::vector<Span> spans = apply_behavior(parts, behavior);
  spans.erase(std::remove_if(spans.begin(), spans.end(), [](const Span& s) { return s.first == s.second; }), spans.end());
  return spans;
}

BpePreTokenizer::Behavior parse_behavior(const JsonAt& node) {
  const std::string name = node.string();
  using B = BpePreTokenizer::Behavior;
  if (name == "Isolated") return B::isolated;
  if (name == "Removed") return B::removed;
  if (name == "MergedWithPrevious") return B::merged_with_previous;
  if (name == "MergedWithNext") return B::merged_with_next;
  if (name == "Contiguous") return B::contiguous;
  fail("{}: split behavior '{}' is not one of Isolated, Removed, MergedWithPrevious, MergedWithNext, Contiguous",
       node.where(), name);
}

void read_steps(const JsonAt& node, std::vector<BpePreTokenizer::Step>& steps) {
  const std::string type = node.required("type").string();
  BpePreTokenizer::Step step;
  if (type == "Sequence") {
    const JsonAt list = node.required("pretokenizers");
    list.expect_array();
    for (size_t i = 0; i < list.node.size(); ++i) read_steps(list[i], steps);
    return;
  } else if (type == "Split") {
    const JsonAt pattern = node.required("pattern");
    if (pattern.has("Regex")) {
      step.regex = std::make_shared<BpeRegex>(pattern["Regex"].string(), false, pattern["Regex"].where());
    } else if (pattern.has("String")) {
      step.regex = std::make_shared<BpeRegex>(pattern["String"].string(), true, pattern["String"].where());
    } else {
      fail("{}: expected {{\"Regex\": ...}} or {{\"String\": ...}}, found {}", pattern.where(), pattern.node.dump());
    }
    step.behavior = parse_behavior(node.required("behavior"));
    step.invert = node.flag("invert", false);
  } else if (type == "ByteLevel") {
    step.byte_level = true;
    step.add_prefix_space = node.flag("add_prefix_space", true);
    if (node.flag("use_regex", true)) step.regex = std::make_shared<BpeRegex>(kGpt2Pattern, false, node.where());
  } else {
    fail("{}: pre-tokenizer '{}' is not supported; supported: Split, ByteLevel, Sequence of them",
         node["type"].where(), type);
  }
  steps.push_back(std::move(step));
}

}  // namespace

BpeRegex::BpeRegex(const std::string& pattern, bool literal, const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);  // LITERAL refuses UCP
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options, &error, &offset, nullptr);
  if (!code) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof message);
    fail("{}: regex '{}' does not compile at offset {}: {}", where, pattern, offset, reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where JIT is unavailable pcre2_match interprets
  code_.reset(code, [](void* p) { pcre2_code_free(static_cast<pcre2_code*>(p)); });
}

std::vector<std::pair<size_t, size_t>> BpeRegex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> matches;
  std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> data(
      pcre2_match_data_create_from_pattern(code_of(code_), nullptr), &pcre2_match_data_free);
  const auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    // The text was checked once up front: checking again per call would cost O(n) each time.
    const int rc = pcre2_match(code_of(code_), subject, text.size(), start, PCRE2_NO_UTF_CHECK, data.get(), nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) fail("PCRE2 match failed with error {}", rc);
    const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(data.get());
    if (ovector[1] > ovector[0]) {
      matches.emplace_back(ovector[0], ovector[1]);
      start = ovector[1];
    } else {
      // An empty match: HF drops it; move on by one character.
      if (ovector[0] >= text.size()) break;
      size_t step = 1;
      while (ovector[0] + step < text.size() && (static_cast<unsigned char>(text[ovector[0] + step]) & 0xC0) == 0x80) ++step;
      start = ovector[0] + step;
    }
  }
  return matches;
}

BpePreTokenizer BpePreTokenizer::from_json(const JsonAt& node) {
  if (node.node.is_null()) fail("{}: no pre-tokenizer; byte-level BPE needs a ByteLevel pre-tokenizer", node.where());
  BpePreTokenizer p;
  read_steps(node, p.steps_);
  if (std::none_of(p.steps_.begin(), p.steps_.end(), [](const Step& s) { return s.byte_level; }))
    fail("{}: no ByteLevel step; only byte-level BPE tokenizers are supported", node.where());
  return p;
}

void BpePreTokenizer::run(std::string_view text, std::vector<std::string>& out) const {
  if (text.empty()) return;  // HF gives no pieces (and no prefix space) for empty text
  std::vector<std::string> pieces{std::string(text)};
  std::vector<std::string> next;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string& piece : pieces) {
      if (step.byte_level) {
        if (step.add_prefix_space && (piece.empty() || piece[0] != ' ')) piece.insert(piece.begin(), ' ');
        const std::vector<Span> spans = step.regex ? split(*step.regex, piece, Behavior::isolated, false)
                                                   : std::vector<Span>{{0, piece.size()}};
        for (const Span& s : spans) {
          next.emplace_back();
          byte_level_encode(std::string_view(piece).substr(s.first, s.second - s.first), next.back());
        }
      } else {
        for (const Span& s : split(*step.regex, piece, step.behavior, step.invert))
          next.emplace_back(piece.substr(s.first, s.second - s.first));
      }
    }
    pieces.swap(next);
  }
  for (std::string& piece : pieces)
    if (!piece.empty()) out.push_back(std::move(piece));
}

}  // namespace turnrl::detail
