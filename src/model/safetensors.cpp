#include "turnrl/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "turnrl/core/error.h"

namespace turnrl {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// The safetensors library refuses headers above 100 MB; so does this reader, before allocating.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

const std::pair<const char*, torch::Dtype> kDtypes[] = {
    {"BF16", torch::kBFloat16}, {"F16", torch::kHalf}, {"F32", torch::kFloat}};

std::string dtype_name(torch::Dtype dtype) {
  for (const auto& [name, value] : kDtypes)
    if (value == dtype) return name;
  fail("safetensors: dtype {} cannot be written; allowed: bfloat16 (BF16), float16 (F16), float32 (F32)",
       c10::toString(dtype));
}

torch::Dtype parse_dtype(const std::string& name, const std::string& path, const std::string& tensor) {
  for (const auto& [known, value] : kDtypes)
    if (name == known) return value;
  fail("safetensors '{}': tensor '{}' has dtype '{}'; supported: BF16, F16, F32", path, tensor, name);
}

uint64_t read_le64(const unsigned char* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

SafetensorsEntry parse_entry(const json& spec, const std::string& path, const std::string& name,
                             uint64_t data_bytes) {
  if (!spec.is_object() || !spec.contains("dtype") || !spec.contains("shape") || !spec.contains("data_offsets"))
    fail("safetensors '{}': tensor '{}' needs an object with dtype, shape and data_offsets; got {}", path, name,
         spec.dump());
  const json& dtype = spec["dtype"];
  const json& shape = spec["shape"];
  const json& offsets = spec["data_offsets"];
  if (!dtype.is_string()) fail("safetensors '{}': tensor '{}' dtype {} is not a string", path, name, dtype.dump());
  SafetensorsEntry entry;
  entry.dtype = parse_dtype(dtype.get<std::string>(), path, name);
  if (!shape.is_array()) fail("safetensors '{}': tensor '{}' shape {} is not an array", path, name, shape.dump());
  uint64_t numel = 1;
  for (const json& dim : shape) {
    if (!dim.is_number_unsigned())
      fail("safetensors '{}': tensor '{}' shape {} must hold non-negative integers", path, name, shape.dump());
    entry.shape.push_back(dim.get<int64_t>());
    numel *= dim.get<uint64_t>();
  }
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    fail("safetensors '{}': tensor '{}' data_offsets {} must be [begin, end]", path, name, offsets.dump());
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  if (entry.begin > entry.end || entry.end > data_bytes)
    fail("safetensors '{}': tensor '{}' data_offsets [{}, {}] are out of range; the data section holds {} bytes "
         "(is the file truncated?)",
         path, name, entry.begin, entry.end, data_bytes);
  const uint64_t expected = numel * c10::elementSize(entry.dtype);
  if (entry.end - entry.begin != expected)
    fail("safetensors '{}': tensor '{}' spans {} bytes but shape {} of {} needs {}", path, name,
         entry.end - entry.begin, shape.dump(), dtype.get<std::string>(), expected);
  return entry;
}

template <typename Map>
std::vector<std::string> keys_of(const Map& map) {
  std::vector<std::string> keys;
  for (const auto& entry : map) keys.push_back(entry.first);
  return keys;
}

void write_all(std::ofstream& out, const void* data, size_t bytes, const std::string& path) {
  out.write(static_cast<const char*>(data), std::streamsize(bytes));
  if (!out) fail("safetensors: cannot write '{}': {}", path, std::strerror(errno));
}

}  // namespace

// The read-only mapping of one file; unmapped when the last tensor viewing it is gone.
struct SafetensorsFile::Mapping {
  void* address = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (address) munmap(address, size);
  }
};

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), mapping_(std::make_shared<Mapping>()) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("safetensors: cannot open '{}': {}", path, std::strerror(errno));
  struct stat info {};
  if (fstat(fd, &info) != 0) {
    close(fd);
    fail("safetensors: cannot stat '{}': {}", path, std::strerror(errno));
  }
  const auto size = uint64_t(info.st_size);
  if (size < 8) {
    close(fd);
    fail("safetensors '{}': truncated: {} bytes, fewer than the 8-byte header length", path, size);
  }
  void* address = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (address == MAP_FAILED) fail("safetensors: cannot map '{}': {}", path, std::strerror(errno));
  mapping_->address = address;
  mapping_->size = size;

  const auto* bytes = static_cast<const unsigned char*>(address);
  const uint64_t header_bytes = read_le64(bytes);
  if (header_bytes > kMaxHeaderBytes || header_bytes > size - 8)
    fail("safetensors '{}': header length {} exceeds the {} bytes after the length field (limit {}); the file is "
         "truncated or not safetensors",
         path, header_bytes, size - 8, kMaxHeaderBytes);
  data_start_ = 8 + header_bytes;
  const uint64_t data_bytes = size - data_start_;

  json header;
  try {
    header = json::parse(bytes + 8, bytes + data_start_);
  } catch (const json::exception& e) {
    fail("safetensors '{}': header is not valid JSON: {}", path, e.what());
  }
  if (!header.is_object()) fail("safetensors '{}': header must be a JSON object; got {}", path, header.type_name());
  for (const auto& [name, spec] : header.items()) {
    if (name == "__metadata__") {
      if (!spec.is_object()) fail("safetensors '{}': __metadata__ must be an object of strings", path);
      for (const auto& [key, value] : spec.items()) {
        if (!value.is_string())
          fail("safetensors '{}': __metadata__ '{}' is {}; values must be strings", path, key, value.dump());
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    entries_[name] = parse_entry(spec, path, name, data_bytes);
  }
  std::vector<std::pair<const std::string*, const SafetensorsEntry*>> by_offset;
  for (const auto& [name, entry] : entries_) by_offset.emplace_back(&name, &entry);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto& a, const auto& b) { return a.second->begin < b.second->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    if (by_offset[i].second->begin < by_offset[i - 1].second->end)
      fail("safetensors '{}': tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", path, *by_offset[i - 1].first,
           by_offset[i - 1].second->begin, by_offset[i - 1].second->end, *by_offset[i].first,
           by_offset[i].second->begin, by_offset[i].second->end);
}

std::vector<std::string> SafetensorsFile::names() const { return keys_of(entries_); }

const SafetensorsEntry& SafetensorsFile::entry(const std::string& name) const {
  const auto it = entries_.find(name);
  if (it == entries_.end()) fail("safetensors '{}': no tensor '{}'", path_, name);
  return it->second;
}

torch::Tensor SafetensorsFile::view(const std::string& name) const {
  const SafetensorsEntry& e = entry(name);
  auto* data = static_cast<char*>(mapping_->address) + data_start_ + e.begin;
  std::shared_ptr<Mapping> keep_alive = mapping_;
  return torch::from_blob(
      data, e.shape, [keep_alive](void*) mutable { keep_alive.reset(); }, torch::TensorOptions(e.dtype));
}

// ---- checkpoint folders ----

SafetensorsCheckpoint::SafetensorsCheckpoint(const std::string& folder) {
  const fs::path single = fs::path(folder) / "model.safetensors";
  const fs::path index = fs::path(folder) / "model.safetensors.index.json";
  if (fs::exists(index)) {
    json parsed;
    try {
      std::ifstream in(index);
      parsed = json::parse(in);
    } catch (const json::exception& e) {
      fail("safetensors index '{}': not valid JSON: {}", index.string(), e.what());
    }
    if (!parsed.is_object() || !parsed.contains("weight_map") || !parsed["weight_map"].is_object())
      fail("safetensors index '{}': needs an object \"weight_map\": {{tensor: file}}", index.string());
    std::map<std::string, size_t> shard_index;
    for (const auto& [name, file] : parsed["weight_map"].items()) {
      if (!file.is_string())
        fail("safetensors index '{}': weight_map['{}'] is {}; must be a file name", index.string(), name, file.dump());
      const std::string file_name = file.get<std::string>();
      auto it = shard_index.find(file_name);
      if (it == shard_index.end()) {
        shards_.emplace_back((fs::path(folder) / file_name).string());
        it = shard_index.emplace(file_name, shards_.size() - 1).first;
      }
      if (!shards_[it->second].contains(name))
        fail("safetensors index '{}': tensor '{}' is mapped to '{}', which does not hold it", index.string(), name,
             file_name);
      shard_of_[name] = it->second;
    }
    return;
  }
  if (!fs::exists(single))
    fail("checkpoint '{}': neither model.safetensors nor model.safetensors.index.json is there", folder);
  shards_.emplace_back(single.string());
  for (const std::string& name : shards_.front().names()) shard_of_[name] = 0;
}

std::vector<std::string> SafetensorsCheckpoint::names() const { return keys_of(shard_of_); }

const SafetensorsFile& SafetensorsCheckpoint::shard(const std::string& name) const {
  const auto it = shard_of_.find(name);
  if (it == shard_of_.end()) fail("checkpoint: no tensor '{}'", name);
  return shards_[it->second];
}

const SafetensorsEntry& SafetensorsCheckpoint::entry(const std::string& name) const { return shard(name).entry(name); }
torch::Tensor SafetensorsCheckpoint::view(const std::string& name) const { return shard(name).view(name); }
const std::string& SafetensorsCheckpoint::file_of(const std::string& name) const { return shard(name).path(); }

// ---- writing ----

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (name == "__metadata__" || header.contains(name)) fail("safetensors '{}': tensor name '{}' is repeated or reserved", path, name);
    const uint64_t bytes = uint64_t(tensor.numel()) * tensor.element_size();
    header[name] = {{"dtype", dtype_name(tensor.scalar_type())},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));

  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) fail("safetensors: cannot create '{}': {}", temporary, std::strerror(errno));
    write_all(out, length, sizeof length, temporary);
    write_all(out, text.data(), text.size(), temporary);
    for (const auto& entry : tensors) {
      const torch::Tensor host = entry.second.detach().to(torch::kCPU).contiguous();
      write_all(out, host.data_ptr(), size_t(host.numel()) * host.element_size(), temporary);
    }
    out.close();
    if (!out) fail("safetensors: cannot write '{}': {}", temporary, std::strerror(errno));
  }
  std::error_code error;
  fs::rename(temporary, path, error);
  if (error) fail("safetensors: cannot rename '{}' to '{}': {}", temporary, path, error.message());
}

std::vector<std::string> write_safetensors_checkpoint(const std::string& folder, const NamedTensors& tensors,
                                                      const SafetensorsCheckpointOptions& options) {
  if (options.max_shard_bytes() < 1)
    fail("save_pretrained.max_shard_bytes: {}; must be >= 1", options.max_shard_bytes());
  fs::create_directories(folder);
  std::vector<NamedTensors> shards(1);
  int64_t shard_bytes = 0;
  for (const auto& entry : tensors) {
    const int64_t bytes = entry.second.numel() * int64_t(entry.second.element_size());
    if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes()) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back(entry);
    shard_bytes += bytes;
  }
  // Files of an earlier save with another shard count would shadow or contradict this one.
  for (const auto& old : fs::directory_iterator(folder)) {
    const std::string name = old.path().filename().string();
    if (name == "model.safetensors" || name == "model.safetensors.index.json" ||
        (name.rfind("model-", 0) == 0 && old.path().extension() == ".safetensors"))
      fs::remove(old.path());
  }
  if (shards.size() == 1) {
    write_safetensors((fs::path(folder) / "model.safetensors").string(), tensors);
    return {"model.safetensors"};
  }
  std::vector<std::string> written;
  json weight_map = json::object();
  int64_t total = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = fmt::format("model-{:05d}-of-{:05d}.safetensors", i + 1, shards.size());
    write_safetensors((fs::path(folder) / name).string(), shards[i]);
    for (const auto& [tensor_name, tensor] : shards[i]) {
      weight_map[tensor_name] = name;
      total += tensor.numel() * int64_t(tensor.element_size());
    }
    written.push_back(name);
  }
  const json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  std::ofstream out(fs::path(folder) / "model.safetensors.index.json");
  out << index.dump(2) << '\n';
  if (!out) fail("safetensors: cannot write the index in '{}'", folder);
  written.push_back("model.safetensors.index.json");
  return written;
}

}  // namespace turnrl
