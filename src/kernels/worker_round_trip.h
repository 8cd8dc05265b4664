#pragma once
// Internal to the sandboxed evaluator backends (cpu, cuda): one request to a worker process and
// the sandbox's verdict on it, mapped onto an EvalResult. What the worker's own reply means is
// each backend's business; this is the part they share.
#include <cstdint>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "turnrl/core/error.h"
#include "turnrl/kernels/evaluator.h"
#include "turnrl/kernels/sandbox.h"

namespace turnrl::eval_detail {

// A fresh random request nonce (replies echo it): from std::random_device, so that no seed a
// candidate could read or guess predicts it.
inline uint64_t fresh_nonce() {
  std::random_device rd;
  return (uint64_t(rd()) << 32) ^ rd();
}

// A message cut to `n` bytes, saying how much was left out.
inline std::string trim_message(std::string s, size_t n) {
  if (s.size() > n) s = s.substr(0, n) + fmt::format("\n[... {} more bytes]", s.size() - n);
  return s;
}

// The worker's last output lines as a message suffix ("" when it wrote nothing).
inline std::string output_note(const SandboxReply& s) {
  return s.output_tail.empty() ? "" : "\noutput: " + s.output_tail;
}

// Sends `request` (restarting the worker first once it has served `max_calls`); the sandbox's reply
// when the worker answered, or nullopt with r.error and r.message set when the sandbox reports a
// crash, timeout, memory or output limit, or a failed start.
inline std::optional<SandboxReply> round_trip(SandboxWorker& worker, const std::string& request, int64_t max_calls,
                                             size_t message_chars, EvalResult& r) {
  if (worker.calls_since_start() >= max_calls) worker.stop();
  SandboxReply s = worker.call(request);
  switch (s.status) {
    case SandboxStatus::ok: return s;
    case SandboxStatus::crashed: r.error = EvalError::crash; break;
    case SandboxStatus::timeout: r.error = EvalError::timeout; break;
    case SandboxStatus::memory: r.error = EvalError::memory; break;
    case SandboxStatus::output_limit: r.error = EvalError::output_limit; break;
    case SandboxStatus::start_failed: r.error = EvalError::internal; break;
    case SandboxStatus::bad_frame: r.error = EvalError::crash; break;  // the backend's own frame checks say more
  }
  r.message = trim_message(s.message + output_note(s), message_chars);
  return std::nullopt;
}

}  // namespace turnrl::eval_detail
