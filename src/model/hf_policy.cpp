#include "turnrl/model/hf_policy.h"

#include <filesystem>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "decoder_parts.h"
#include "turnrl/core/error.h"

namespace turnrl {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

const std::pair<const char*, torch::Dtype> kDtypeNames[] = {
    {"bfloat16", torch::kBFloat16}, {"float16", torch::kHalf}, {"float32", torch::kFloat},
    {"bf16", torch::kBFloat16},     {"fp16", torch::kHalf},    {"fp32", torch::kFloat}};

const char* const kCopiedFiles[] = {"tokenizer.json",  "tokenizer_config.json", "special_tokens_map.json",
                                    "vocab.json",      "merges.txt",            "added_tokens.json",
                                    "chat_template.jinja", "generation_config.json"};

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) fail("cannot write '{}'", path.string());
}

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot read '{}'", path.string());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail("'{}': not valid JSON: {}", path.string(), e.what());
  }
}

// The tokenizer and generation files of `from` that exist, into `folder` ("" = none).
void copy_tokenizer_files(const std::string& from, const std::string& folder) {
  if (from.empty()) return;
  if (!fs::is_directory(from)) fail("save_pretrained.copy_files_from: '{}' is not a folder", from);
  for (const char* name : kCopiedFiles) {
    const fs::path source = fs::path(from) / name;
    if (fs::exists(source) && fs::absolute(source) != fs::absolute(fs::path(folder) / name))
      fs::copy_file(source, fs::path(folder) / name, fs::copy_options::overwrite_existing);
  }
}

}  // namespace

torch::Dtype hf_dtype_from_name(const std::string& name) {
  for (const auto& [known, dtype] : kDtypeNames)
    if (name == known) return dtype;
  fail("model.dtype: '{}'; allowed: bfloat16, float16, float32 (or bf16, fp16, fp32)", name);
}

std::string hf_dtype_name(torch::Dtype dtype) {
  for (const auto& [name, known] : kDtypeNames)
    if (dtype == known) return name;
  fail("model.dtype: {}; allowed: bfloat16, float16, float32", c10::toString(dtype));
}

void validate(const HFModelOptions& o) {
  if (o.path().empty()) fail("model.path: empty; name a folder with config.json and model.safetensors");
  if (!fs::is_directory(o.path())) fail("model.path: '{}' is not a folder", o.path());
  hf_dtype_name(o.dtype());
  if (o.logp_chunk_size() < 1) fail("model.logp_chunk_size: {} is out of range; allowed: >= 1", o.logp_chunk_size());
  validate(o.lora());
}

std::unique_ptr<HFPolicy> load_hf_policy(const HFModelOptions& options) {
  validate(options);
  const HFConfig config = read_hf_config(options.path());
  HFDecoder model(config, torch::TensorOptions(options.dtype()).device(options.device()));
  model->load_weights(SafetensorsCheckpoint(options.path()));
  model->add_lora(options.lora());
  model->set_activation_checkpointing(options.activation_checkpointing());
  model->set_fused_kernels(options.fused_kernels());
  auto policy = std::make_unique<HFPolicy>(model, options.path(),
                                           options.tokenizer_dir().empty() ? options.path() : options.tokenizer_dir());
  policy->set_logp_chunk_size(options.logp_chunk_size());
  return policy;
}

void HFPolicy::set_logp_chunk_size(int64_t rows) {
  if (rows < 1) fail("model.logp_chunk_size: {} is out of range; allowed: >= 1", rows);
  logp_chunk_size_ = rows;
}

TokenLogp HFPolicy::forward_logp(const torch::Tensor& tokens, const torch::Tensor& attention_mask,
                                 const torch::Tensor& response_mask) {
  return token_logp_at_responses(model_->final_hidden(tokens, attention_mask), model_->lm_head_weight(), tokens,
                                 response_mask, logp_chunk_size_, model_->fused_kernels(), logp_temperature());
}

Rollout HFPolicy::generate(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                           const SamplingOptions& options) {
  validate(options);
  if (options.use_cache) return run_engine(prompts, prompt_mask, options, nullptr);
  torch::NoGradGuard no_grad;
  HFDecoder model = model_;
  RecomputeNextToken next([model](const torch::Tensor& t, const torch::Tensor& m) mutable { return model->forward(t, m); });
  return sample(next, prompts, prompt_mask, options);
}

Rollout HFPolicy::generate_turn(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                                const SamplingOptions& options, const std::vector<int64_t>& episodes) {
  validate(options);
  if (int64_t(episodes.size()) != prompts.size(0))
    fail("generate_turn: {} episodes for {} prompt rows; one per row", episodes.size(), prompts.size(0));
  if (!options.use_cache) return generate(prompts, prompt_mask, options);
  return run_engine(prompts, prompt_mask, options, &episodes);
}

void HFPolicy::end_episodes() {
  if (engine_) engine_->release_all();
  episode_request_.clear();
}

void HFPolicy::engine_options(const GenerationEngineOptions& options) {
  if (options.slots() < 0 || options.capacity() < 0)
    fail("HFPolicy engine options: slots {} and capacity {} must be >= 0 (0 = follow the calls)", options.slots(),
         options.capacity());
  engine_options_ = options;
  engine_.reset();
  episode_request_.clear();
}

namespace {

int64_t round_up_to_power_of_two(int64_t n, int64_t at_least) {
  int64_t v = at_least;
  while (v < n) v *= 2;
  return v;
}

}  // namespace

Rollout HFPolicy::run_engine(const torch::Tensor& prompts, const torch::Tensor& prompt_mask,
                             const SamplingOptions& options, const std::vector<int64_t>* episodes) {
  const torch::Tensor mask = checked_prompt_mask(prompts, prompt_mask);
  const int64_t batch = prompts.size(0), prompt_length = prompts.size(1);
  const int64_t needed = prompt_length + options.max_new_tokens;
  const int64_t slots = engine_options_.slots() > 0 ? engine_options_.slots() : batch;
  if (engine_options_.capacity() > 0 && needed > engine_options_.capacity())
    fail("HFPolicy engine capacity (model.engine.capacity) {}: a call needs {} tokens per slot (prompt {} + "
         "max_new_tokens {}); allowed: capacity >= prompt + max_new_tokens, or 0 to follow the calls",
         engine_options_.capacity(), needed, prompt_length, options.max_new_tokens);
  const int64_t capacity = engine_options_.capacity() > 0 ? engine_options_.capacity() : round_up_to_power_of_two(needed, 256);
  if (!engine_ || engine_->options().slots() < slots || engine_->options().capacity() < needed) {
    const int64_t engine_slots = std::max(slots, engine_ ? engine_->options().slots() : 0);
    // The old engine's cache goes first: a larger one beside it would need both at once (a second
    // turn's longer prompts at 64 slots took 30 + 60 GB on an 80 GB GPU).
    engine_.reset();
    episode_request_.clear();
    engine_ = std::make_unique<GenerationEngine>(
        model_, GenerationEngineOptions(engine_options_).slots(engine_slots).capacity(capacity));
  }

  const torch::Tensor host_prompts = prompts.to(torch::kCPU).contiguous(), host_mask = mask.to(torch::kCPU).contiguous();
  const std::vector<int64_t> keys = row_keys(options, batch);
  std::vector<int64_t> ids;
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t* row = host_prompts[b].data_ptr<int64_t>();
    const bool* valid = host_mask[b].data_ptr<bool>();
    GenerationRequest request;
    for (int64_t t = 0; t < prompt_length; ++t)
      if (valid[t]) request.tokens.push_back(row[t]);
    request.sampling = options;
    request.key = keys[size_t(b)];
    if (episodes) {
      const auto kept = episode_request_.find((*episodes)[size_t(b)]);
      request.extends = kept == episode_request_.end() ? -1 : kept->second;
      request.keep = true;
    }
    ids.push_back(engine_->add(std::move(request)));
  }
  const std::vector<GenerationResult> results = engine_->run();
  if (episodes)
    for (int64_t b = 0; b < batch; ++b) episode_request_[(*episodes)[size_t(b)]] = ids[size_t(b)];

  // The sampler's layout (sampler.h: Rollout): prompts as given, then each row's tokens, padded.
  int64_t width = 0;
  for (const GenerationResult& r : results) width = std::max(width, int64_t(r.tokens.size()));
  torch::Tensor generated = torch::full({batch, width}, options.pad_id, torch::kLong);
  torch::Tensor logp = torch::zeros({batch, width}, torch::kFloat);
  torch::Tensor generated_valid = torch::zeros({batch, width}, torch::kBool);
  for (int64_t b = 0; b < batch; ++b) {
    const GenerationResult& r = results[size_t(b)];
    const auto n = int64_t(r.tokens.size());
    generated[b].narrow(0, 0, n).copy_(torch::tensor(r.tokens, torch::kLong));
    logp[b].narrow(0, 0, n).copy_(torch::tensor(r.logp, torch::kFloat));
    generated_valid[b].narrow(0, 0, n).fill_(true);
  }
  return make_rollout(prompts, mask, generated, generated_valid, logp);
}

std::vector<torch::Tensor> HFPolicy::parameters() {
  std::vector<torch::Tensor> trainable;
  for (const auto& p : model_->parameters())
    if (p.requires_grad()) trainable.push_back(p);
  return trainable;
}

void HFPolicy::to(torch::Dtype dtype) {
  engine_.reset();
  model_->to(dtype);
  for (const auto& m : model_->modules())
    if (auto* linear = dynamic_cast<LoraLinearImpl*>(m.get()); linear && linear->has_adapter()) {
      linear->lora_A->to(torch::kFloat);
      linear->lora_B->to(torch::kFloat);
    }
}

void HFPolicy::save(const std::string& folder) {
  const SavePretrainedOptions options = SavePretrainedOptions().copy_files_from(tokenizer_dir_);
  if (!model_->lora().enabled()) return save_pretrained(folder, options);
  save_adapter(folder);
  copy_tokenizer_files(options.copy_files_from(), folder);
}

void HFPolicy::load(const std::string& folder) {
  if (model_->lora().enabled()) return load_adapter(folder);
  model_->load_weights(SafetensorsCheckpoint(folder));
}

void HFPolicy::save_pretrained(const std::string& folder, const SavePretrainedOptions& options) const {
  fs::create_directories(folder);
  write_safetensors_checkpoint(folder, model_->merged_state(),
                               SafetensorsCheckpointOptions().max_shard_bytes(options.max_shard_bytes()));
  write_text(fs::path(folder) / "config.json", hf_config_json(config(), hf_dtype_name(model_->dtype())));
  copy_tokenizer_files(options.copy_files_from(), folder);
}

void HFPolicy::save_adapter(const std::string& folder) const {
  const LoraOptions& lora = model_->lora();
  if (!lora.enabled()) fail("save_adapter: this policy has no LoRA adapters (model.lora.rank is 0)");
  fs::create_directories(folder);
  write_safetensors((fs::path(folder) / "adapter_model.safetensors").string(), model_->adapter_state());
  const json adapter_config = {{"peft_type", "LORA"},
                               {"task_type", "CAUSAL_LM"},
                               {"base_model_name_or_path", source_},
                               {"r", lora.rank()},
                               {"lora_alpha", lora.alpha()},
                               {"use_rslora", lora.rslora()},
                               {"target_modules", lora.target_modules()},
                               {"lora_dropout", 0.0},
                               {"bias", "none"},
                               {"fan_in_fan_out", false},
                               {"init_lora_weights", true},
                               {"inference_mode", true},
                               {"modules_to_save", nullptr}};
  write_text(fs::path(folder) / "adapter_config.json", adapter_config.dump(2) + "\n");
}

void HFPolicy::load_adapter(const std::string& folder) {
  const LoraOptions& lora = model_->lora();
  if (!lora.enabled()) fail("load_adapter: this policy has no LoRA adapters (model.lora.rank is 0)");
  const fs::path config_path = fs::path(folder) / "adapter_config.json";
  const json config = read_json(config_path);
  if (!config.contains("r") || config["r"] != lora.rank())
    fail("'{}': r is {}; this policy's lora.rank is {}", config_path.string(),
         config.contains("r") ? config["r"].dump() : "missing", lora.rank());
  std::set<std::string> stored, mine(lora.target_modules().begin(), lora.target_modules().end());
  if (config.contains("target_modules") && config["target_modules"].is_array())
    for (const json& name : config["target_modules"])
      if (name.is_string()) stored.insert(name.get<std::string>());
  if (stored != mine)
    fail("'{}': target_modules {} differ from this policy's lora.target_modules {}", config_path.string(),
         config.contains("target_modules") ? config["target_modules"].dump() : "missing", fmt::join(mine, ", "));

  const SafetensorsFile file((fs::path(folder) / "adapter_model.safetensors").string());
  torch::NoGradGuard no_grad;
  std::set<std::string> expected;
  for (const auto& [name, tensor] : model_->adapter_state()) {
    expected.insert(name);
    if (!file.contains(name)) fail("adapter '{}': tensor '{}' is missing", file.path(), name);
    const SafetensorsEntry& entry = file.entry(name);
    if (torch::IntArrayRef(entry.shape) != tensor.sizes())
      fail("adapter '{}': tensor '{}' has shape {}, this policy expects {}", file.path(), name,
           c10::str(torch::IntArrayRef(entry.shape)), c10::str(tensor.sizes()));
    torch::Tensor target = tensor;  // shares storage with the parameter
    target.copy_(file.view(name));
  }
  for (const std::string& name : file.names())
    if (!expected.count(name)) fail("adapter '{}': tensor '{}' has no place in this policy", file.path(), name);
}

}  // namespace turnrl
