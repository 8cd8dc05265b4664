#include "turnrl/core/config_fields.h"

namespace turnrl {

void ConfigWriter::open(const std::string& name, const std::string& comment) {
  if (depth_ == 0 && !out_.empty()) out_ += "\n";
  if (annotate_ && depth_ == 0) out_ += "# " + comment + "\n";
  out_ += indent() + name + ":";
  if (annotate_ && depth_ > 0) out_ += "  # " + comment;
  out_ += "\n";
  ++depth_;
}

void ConfigWriter::key(const std::string& name, const std::string& yaml_value, const std::string& comment) {
  std::string line = indent() + name + ": " + yaml_value;
  if (annotate_) line += std::string(line.size() < 40 ? 40 - line.size() : 1, ' ') + "# " + comment;
  out_ += line + "\n";
}

void ConfigWriter::empty(const std::string& name, const std::string& comment) { key(name, "{}", comment); }

void ConfigWriter::comment(const std::string& text) {
  if (annotate_) out_ += indent() + "# " + text + "\n";
}

void ConfigWriter::raw(const std::string& line) { out_ += indent() + line + "\n"; }

std::string ConfigWriter::quoted(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

void FieldWriter::texts(const char* key, std::vector<std::string>& v, const std::string& help) {
  std::vector<std::string> q;
  for (const auto& s : v) q.push_back(ConfigWriter::quoted(s));
  w_.key(key, fmt::format("[{}]", fmt::join(q, ", ")), help);
}

}  // namespace turnrl
