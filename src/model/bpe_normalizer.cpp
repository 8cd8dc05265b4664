#include "bpe_normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>

namespace turnrl::detail {

namespace {

void read_forms(const JsonAt& node, std::vector<BpeNormalizer::Form>& forms) {
  const std::string type = node.required("type").string();
  if (type == "Sequence") {
    const JsonAt list = node.required("normalizers");
    list.expect_array();
    for (size_t i = 0; i < list.node.size(); ++i) read_forms(list[i], forms);
  } else if (type == "NFC") {
    forms.push_back(BpeNormalizer::Form::nfc);
  } else if (type == "NFD") {
    forms.push_back(BpeNormalizer::Form::nfd);
  } else if (type == "NFKC") {
    forms.push_back(BpeNormalizer::Form::nfkc);
  } else if (type == "NFKD") {
    forms.push_back(BpeNormalizer::Form::nfkd);
  } else {
    fail("{}: normalizer '{}' is not supported; supported: NFC, NFD, NFKC, NFKD, Sequence of them, null",
         node["type"].where(), type);
  }
}

const icu::Normalizer2& icu_instance(BpeNormalizer::Form form) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* n = nullptr;
  switch (form) {
    case BpeNormalizer::Form::nfc: n = icu::Normalizer2::getNFCInstance(status); break;
    case BpeNormalizer::Form::nfd: n = icu::Normalizer2::getNFDInstance(status); break;
    case BpeNormalizer::Form::nfkc: n = icu::Normalizer2::getNFKCInstance(status); break;
    case BpeNormalizer::Form::nfkd: n = icu::Normalizer2::getNFKDInstance(status); break;
  }
  if (U_FAILURE(status) || !n) fail("ICU: cannot load the Unicode normalization data ({})", u_errorName(status));
  return *n;
}

}  // namespace

BpeNormalizer BpeNormalizer::from_json(const JsonAt& node) {
  BpeNormalizer n;
  if (!node.node.is_null()) read_forms(node, n.forms_);
  return n;
}

std::string BpeNormalizer::apply(std::string_view text) const {
  std::string current(text);
  // ASCII is invariant under all four forms: the common case costs one scan.
  bool ascii = true;
  for (const char c : current) ascii &= static_cast<unsigned char>(c) < 0x80;
  if (ascii) return current;
  for (const Form form : forms_) {
    std::string out;
    icu::StringByteSink<std::string> sink(&out);
    UErrorCode status = U_ZERO_ERROR;
    icu_instance(form).normalizeUTF8(0, icu::StringPiece(current.data(), int32_t(current.size())), sink, nullptr, status);
    if (U_FAILURE(status)) fail("ICU: Unicode normalization failed ({})", u_errorName(status));
    current = std::move(out);
  }
  return current;
}

}  // namespace turnrl::detail
