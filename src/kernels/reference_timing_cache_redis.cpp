#include "turnrl/kernels/reference_timing_cache.h"

#include <chrono>
#include <fstream>
#include <sstream>

#include "turnrl/core/error.h"
#include "turnrl/core/filesystem.h"
#include "turnrl/kernels/cpu_tasks.h"
#include "turnrl/kernels/redis_connection.h"
#include "turnrl/core/hash.h"
#include "turnrl/kernels/sandbox.h"

namespace turnrl {
namespace {

struct Fnv {
  uint64_t h = kFnv1aOffset;
  Fnv& bytes(const void* p, size_t n) {
    h = fnv1a64(std::string_view(static_cast<const char*>(p), n), h);
    return *this;
  }
  Fnv& str(const std::string& s) { return num(uint64_t(s.size())).bytes(s.data(), s.size()); }
  template <typename T>
  Fnv& num(T v) { return bytes(&v, sizeof v); }
};

// The worker program holds the reference code (cpu_tasks.cpp): any rebuild changes the key.
uint64_t worker_program_hash() {
  static const uint64_t hash = [] {
    return Fnv().str(read_file(find_helper_program("turnrl_cpu_worker"), "the CPU worker program")).h;
  }();
  return hash;
}

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string cpu_task_fingerprint(const std::string& name, const CpuEvalOptions& options) {
  const CpuTask& t = cpu_task(name);
  Fnv f;
  f.str(t.name).num(t.level).str(t.description);
  for (const auto& in : t.inputs) f.str(in.name).num(int(in.distribution)).num(in.a).num(in.b);
  for (const auto& set : t.shape_sets) {
    f.num(set.size());
    for (const auto& shape : set) {
      f.num(shape.size());
      for (int64_t d : shape) f.num(d);
    }
  }
  f.num(t.atol).num(t.rtol).num(t.precision_atol).num(t.precision_rtol);
  for (const auto& r : t.replaces) f.str(r);
  f.num(options.warmup).num(options.flush_caches).num(worker_program_hash());
  return hex64(f.h);
}

std::string cpu_device_kind() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0 && line.find(':') != std::string::npos) {
      const std::string model = line.substr(line.find(':') + 1);
      return "cpu:" + model.substr(std::min(model.find_first_not_of(' '), model.size()));
    }
  return "cpu:unknown";
}

ReferenceTimingCache::ReferenceTimingCache(RedisConnection* redis, std::string prefix, double ttl_seconds)
    : redis_(redis), prefix_(std::move(prefix)), ttl_seconds_(ttl_seconds) {}

std::string ReferenceTimingCache::redis_key(const ReferenceTimingKey& k) const {
  return fmt::format("{}:reference:{}:{}:{}", prefix_, k.device, k.task, k.fingerprint);
}

std::optional<TimingStats> ReferenceTimingCache::find(const ReferenceTimingKey& key) {
  const std::string rk = redis_key(key);
  if (auto it = local_.find(rk); it != local_.end()) {
    if (it->second.second > steady_seconds()) return it->second.first;
    local_.erase(it);
  }
  if (!redis_) return std::nullopt;
  const RedisReply r = redis_->command({"GET", rk});
  if (r.type != RedisReply::Type::string) return std::nullopt;
  TimingStats s;
  std::istringstream in(r.str);
  if (!(in >> s.median_us >> s.min_us >> s.spread_us >> s.trials) || s.trials <= 0) return std::nullopt;
  local_[rk] = {s, steady_seconds() + ttl_seconds_};
  return s;
}

TimingStats ReferenceTimingCache::store(const ReferenceTimingKey& key, const TimingStats& stats) {
  const std::string rk = redis_key(key);
  if (redis_) {
    const std::string value = fmt::format("{:.17g} {:.17g} {:.17g} {}", stats.median_us, stats.min_us, stats.spread_us,
                                          stats.trials);
    const RedisReply r = redis_->command(
        {"SET", rk, value, "NX", "PX", std::to_string(int64_t(ttl_seconds_ * 1000))});
    if (r.is_nil()) {  // another worker stored first: use its entry, as every other worker will
      local_.erase(rk);
      if (auto existing = find(key)) return *existing;
    }
  }
  local_[rk] = {stats, steady_seconds() + ttl_seconds_};
  return stats;
}

void apply_reference_timing(EvalResult& r, const TimingStats& reference) {
  r.reference_time = reference;
  if (r.correct && r.candidate_time.median_us > 0) r.speedup = reference.median_us / r.candidate_time.median_us;
}

}  // namespace turnrl
