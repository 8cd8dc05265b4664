#include "turnrl/kernels/python_tasks.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <sstream>

#include "../core/json_lines.h"
#include "turnrl/core/checked_write.h"
#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/rl/metrics.h"

namespace turnrl {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::vector<std::string> kTopKeys = {"id",        "backend",  "level",   "description",
                                           "reference", "language", "metadata"};
const std::vector<std::string> kMetadataKeys = {"entry_point", "atol", "rtol", "precision_atol", "precision_rtol",
                                                "forbid", "extra_shapes", "device", "name", "source", "problem_id",
                                                "note"};

bool is_identifier(const std::string& s) {
  if (s.empty() || !(std::isalpha(static_cast<unsigned char>(s[0])) || s[0] == '_')) return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
}

std::string trim(const std::string& s) {
  const auto a = s.find_first_not_of(" \t");
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(" \t") - a + 1);
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::stringstream ss(s);
  while (std::getline(ss, part, sep))
    if (!trim(part).empty()) out.push_back(trim(part));
  return out;
}

double tolerance(const std::string& value, const std::string& key, const std::string& where) {
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || end != value.c_str() + value.size() || !(v >= 0) || v > 1e6)
    fail("{}: metadata.{}: '{}' is not allowed; allowed: a number in [0, 1e6]", where, key, value);
  return v;
}

std::vector<std::vector<std::pair<std::string, int64_t>>> parse_shapes(const std::string& value,
                                                                       const std::string& where) {
  std::vector<std::vector<std::pair<std::string, int64_t>>> sets;
  for (const std::string& set : split(value, ';')) {
    std::vector<std::pair<std::string, int64_t>> overrides;
    for (const std::string& item : split(set, ',')) {
      const auto eq = item.find('=');
      const std::string name = trim(item.substr(0, eq));
      const std::string num = eq == std::string::npos ? "" : trim(item.substr(eq + 1));
      char* end = nullptr;
      const long long v = std::strtoll(num.c_str(), &end, 10);
      if (!is_identifier(name) || num.empty() || end != num.c_str() + num.size() || v < 0)
        fail("{}: metadata.extra_shapes: '{}' is not allowed; allowed: NAME=INT pairs separated by ',', sets "
             "separated by ';' (e.g. 'batch=7,dim=129;batch=1')", where, item);
      overrides.emplace_back(name, int64_t(v));
    }
    if (!overrides.empty()) sets.push_back(std::move(overrides));
  }
  return sets;
}

std::string shapes_text(const PythonTask& t) {
  std::string out;
  for (const auto& set : t.extra_shapes) {
    if (!out.empty()) out += ";";
    for (size_t i = 0; i < set.size(); ++i) out += fmt::format("{}{}={}", i ? "," : "", set[i].first, set[i].second);
  }
  return out;
}

std::string number_text(double v) { return fmt::format("{}", v); }

}  // namespace

Task PythonTask::to_task() const {
  Task t;
  t.id = id;
  t.backend = "python";
  t.level = level;
  t.description = description;
  t.reference = reference;
  t.language = "python";
  t.metadata = metadata;
  t.metadata["entry_point"] = entry_point;
  t.metadata["atol"] = number_text(atol);
  t.metadata["rtol"] = number_text(rtol);
  t.metadata["precision_atol"] = number_text(precision_atol);
  t.metadata["precision_rtol"] = number_text(precision_rtol);
  if (!forbid.empty()) t.metadata["forbid"] = fmt::format("{}", fmt::join(forbid, ","));
  if (!extra_shapes.empty()) t.metadata["extra_shapes"] = shapes_text(*this);
  t.metadata["device"] = device;
  return t;
}

const PythonTask* PythonTaskSet::find(const std::string& id) const {
  for (const auto& t : tasks)
    if (t.id == id) return &t;
  return nullptr;
}

void validate_python_task(const PythonTask& t, const std::string& where) {
  if (t.id.empty()) fail("{}: 'id' must not be empty", where);
  if (t.level < 1 || t.level > 3) fail("{}: level {} is out of range; allowed: 1..3", where, t.level);
  if (!is_identifier(t.entry_point))
    fail("{}: metadata.entry_point: '{}' is not allowed; allowed: a Python class name", where, t.entry_point);
  if (t.reference.find_first_not_of(" \t\r\n") == std::string::npos)
    fail("{}: missing required key 'reference' (the Python source of class {})", where, t.entry_point);
  for (const std::string& needed :
       {"class " + t.entry_point, std::string("def get_inputs"), std::string("def get_init_inputs")})
    if (t.reference.find(needed) == std::string::npos)
      fail("{}: 'reference' has no '{}'; a reference defines class {}, get_inputs() and get_init_inputs()", where,
           needed, t.entry_point);
  for (const std::string& op : t.forbid)
    if (op.rfind("aten::", 0) != 0 || !is_identifier(op.substr(6)))
      fail("{}: metadata.forbid: '{}' is not allowed; allowed: ATen op names such as aten::_softmax", where, op);
  if (t.device != "cpu" && t.device != "cuda" && t.device != "any")
    fail("{}: metadata.device: '{}' is not allowed; allowed: cpu, cuda, any", where, t.device);
}

PythonTaskSet load_python_tasks(const std::string& path) {
  PythonTaskSet set;
  detail::for_each_json_line(path, "the task file", [&](const json& n, const std::string& where) {
    auto text = [&](const char* key, std::string& out) {
      const auto v = n.find(key);
      if (v == n.end() || v->is_null()) return;
      if (!v->is_string()) fail("{}: key '{}' must be a string, got {}", where, key, detail::json_kind(*v));
      out = v->get<std::string>();
    };
    for (const auto& member : n.items())
      if (std::find(kTopKeys.begin(), kTopKeys.end(), member.key()) == kTopKeys.end())
        fail("{}: unknown key '{}'; allowed: {}", where, member.key(), fmt::join(kTopKeys, ", "));
    PythonTask t;
    if (!n.contains("id")) fail("{}: missing required key 'id'", where);
    text("id", t.id);
    std::string backend = "python", language = "python";
    text("backend", backend);
    if (backend != "python")
      fail("{}: backend '{}' is not allowed in a Python task file; allowed: python", where, backend);
    text("language", language);
    if (language != "python") fail("{}: language '{}' is not allowed; allowed: python", where, language);
    if (const auto lv = n.find("level"); lv != n.end()) {
      if (!lv->is_number() || std::trunc(lv->get<double>()) != lv->get<double>())
        fail("{}: 'level' must be an integer 1..3, got {}", where, lv->dump());
      t.level = int(lv->get<double>());
    }
    text("description", t.description);
    text("reference", t.reference);
    if (const auto meta = n.find("metadata"); meta != n.end() && !meta->is_null()) {
      if (!meta->is_object()) fail("{}: 'metadata' must be an object of strings", where);
      for (const auto& [key, value] : meta->items()) {
        if (std::find(kMetadataKeys.begin(), kMetadataKeys.end(), key) == kMetadataKeys.end())
          fail("{}: unknown metadata key '{}'; allowed: {}", where, key, fmt::join(kMetadataKeys, ", "));
        if (!value.is_string()) fail("{}: metadata.{} must be a string, got {}", where, key, detail::json_kind(value));
        const std::string v = value.get<std::string>();
        if (key == "entry_point") t.entry_point = v;
        else if (key == "atol") t.atol = tolerance(v, key, where);
        else if (key == "rtol") t.rtol = tolerance(v, key, where);
        else if (key == "precision_atol") t.precision_atol = tolerance(v, key, where);
        else if (key == "precision_rtol") t.precision_rtol = tolerance(v, key, where);
        else if (key == "forbid") t.forbid = split(v, ',');
        else if (key == "extra_shapes") t.extra_shapes = parse_shapes(v, where);
        else if (key == "device") t.device = v;
        else t.metadata[key] = v;
      }
    }
    validate_python_task(t, where);
    if (set.find(t.id)) fail("{}: duplicate task id '{}'", where, t.id);
    set.tasks.push_back(std::move(t));
  });
  return set;
}

std::string python_task_json(const PythonTask& t) {
  const Task g = t.to_task();
  std::string meta;
  for (const auto& [k, v] : g.metadata)
    meta += fmt::format("{}{}: {}", meta.empty() ? "" : ", ", json_string(k), json_string(v));
  return fmt::format(R"({{"id": {}, "backend": "python", "level": {}, "language": "python", "description": {}, )"
                     R"("reference": {}, "metadata": {{{}}}}})",
                     json_string(t.id), t.level, json_string(t.description), json_string(t.reference), meta);
}

void write_python_tasks(const std::string& path, const std::vector<PythonTask>& tasks) {
  std::string lines;
  for (const auto& t : tasks) lines += python_task_json(t) + "\n";
  write_file(path, lines);
}

KernelBenchImportResult import_kernelbench(const std::string& folder, const KernelBenchImport& options) {
  if (!fs::is_directory(folder)) fail("import-kernelbench: '{}' is not a folder", folder);
  int level = options.level;
  if (level == 0) {
    std::smatch m;
    const std::string base = fs::path(folder).lexically_normal().filename().string().empty()
                                 ? fs::path(folder).lexically_normal().parent_path().filename().string()
                                 : fs::path(folder).lexically_normal().filename().string();
    level = std::regex_search(base, m, std::regex(R"(level[_-]?(\d))")) ? std::stoi(m[1]) : 1;
  }
  if (level < 1 || level > 3) fail("import-kernelbench: level {} is out of range; allowed: 1..3", level);
  std::vector<std::pair<long, fs::path>> files;
  for (const auto& e : fs::directory_iterator(folder))
    if (e.is_regular_file() && e.path().extension() == ".py")
      files.emplace_back(std::strtol(e.path().filename().c_str(), nullptr, 10), e.path());
  std::sort(files.begin(), files.end());
  KernelBenchImportResult result;
  const std::regex stem_re(R"(^(\d+)_(.+)$)");
  for (const auto& [number, path] : files) {
    const std::string source = read_file(path.string(), "the KernelBench problem");
    const std::string stem = path.stem().string();
    std::smatch m;
    const bool numbered = std::regex_match(stem, m, stem_re);
    const std::string name = numbered ? m[2].str() : stem;
    std::string slug;
    for (char c : name) {
      const char l = char(std::tolower(static_cast<unsigned char>(c)));
      if (std::isalnum(static_cast<unsigned char>(l))) slug += l;
      else if (!slug.empty() && slug.back() != '_') slug += '_';
    }
    while (!slug.empty() && slug.back() == '_') slug.pop_back();
    PythonTask t;
    t.id = fmt::format("{}{}_{}{}", options.id_prefix, level, numbered ? m[1].str() + "_" : "", slug);
    t.level = level;
    t.reference = source;
    t.device = options.device;
    t.metadata["name"] = name;
    t.metadata["source"] = path.filename().string();
    if (numbered) t.metadata["problem_id"] = m[1].str();
    t.description = fmt::format(
        "KernelBench level {} problem {}: {}. Write a class ModelNew with the same constructor and forward "
        "signature as Model, computing the same outputs with your own kernels (Triton, or CUDA through "
        "load_inline).", level, numbered ? m[1].str() : stem, name);
    try {
      validate_python_task(t, path.string());
    } catch (const Error& e) {
      const std::string why = e.what(), prefix = path.string() + ": ";
      result.skipped.emplace_back(path.string(), why.rfind(prefix, 0) == 0 ? why.substr(prefix.size()) : why);
      continue;
    }
    result.tasks.push_back(std::move(t));
  }
  return result;
}

}  // namespace turnrl
