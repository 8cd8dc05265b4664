#pragma once
// safetensors: the weight format of HuggingFace checkpoints. A file is an 8-byte little-endian
// header length N, N bytes of JSON ({"name": {"dtype", "shape", "data_offsets": [begin, end]},
// optional "__metadata__": {string: string}}), then the data; offsets count from byte 8 + N.
// Files are memory-mapped read-only: a tensor is a view of the mapped bytes (torch::from_blob),
// so loading copies each tensor once, straight into its destination (device and dtype).
// Supported dtypes: BF16, F16, F32. Every malformed file is a turnrl::Error naming the file and,
// where one is at fault, the tensor.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/arg.h>
#include <torch/types.h>

namespace turnrl {

struct SafetensorsEntry {
  torch::Dtype dtype = torch::kFloat;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // byte range in the data section (after the header)
};

class SafetensorsFile {
 public:
  // Maps `path` and validates the header: length within the file, JSON, known dtypes, offsets
  // inside the data section, each range exactly shape x dtype bytes, no two ranges overlapping.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // A CPU tensor viewing the mapped bytes, read-only by contract: copy it (copy_, .to with another
  // device or dtype, .clone) before writing. The view keeps the mapping alive.
  torch::Tensor view(const std::string& name) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> mapping_;
  uint64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// The weights of a checkpoint folder as transformers writes them: `model.safetensors`, or
// `model.safetensors.index.json` ({"weight_map": {tensor: shard file}}) and its shards. Tensors
// are looked up by name in whichever file holds them.
class SafetensorsCheckpoint {
 public:
  explicit SafetensorsCheckpoint(const std::string& folder);

  std::vector<std::string> names() const;  // sorted
  bool contains(const std::string& name) const { return shard_of_.count(name) > 0; }
  const SafetensorsEntry& entry(const std::string& name) const;
  torch::Tensor view(const std::string& name) const;
  // The file a tensor lives in (for messages).
  const std::string& file_of(const std::string& name) const;

 private:
  const SafetensorsFile& shard(const std::string& name) const;
  std::vector<SafetensorsFile> shards_;
  std::map<std::string, size_t> shard_of_;
};

// Named tensors in the order they are written.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// Writes one safetensors file (atomically: a temporary file renamed into place). Tensors may be on
// any device; dtypes BF16, F16, F32. The header is padded with spaces to a multiple of 8 bytes,
// as the safetensors library does, so the data of every tensor is aligned.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

struct SafetensorsCheckpointOptions {
  // Above this many bytes of tensor data the checkpoint is split into shards
  // (model-00001-of-0000N.safetensors + model.safetensors.index.json), as save_pretrained's
  // max_shard_size does; a single tensor larger than it gets a shard of its own.
  TORCH_ARG(int64_t, max_shard_bytes) = int64_t(5) << 30;
};

// Writes the weights of a checkpoint folder as save_pretrained does, metadata {"format": "pt"}.
// Returns the files written (relative to `folder`).
std::vector<std::string> write_safetensors_checkpoint(const std::string& folder, const NamedTensors& tensors,
                                                      const SafetensorsCheckpointOptions& options = {});

}  // namespace turnrl
