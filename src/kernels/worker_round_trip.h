#pragma once
// Internal to the sandboxed evaluator backends (cpu, cuda): one request to a worker process and
// the sandbox's verdict on it, mapped onto an EvalResult. What the worker's own reply means is
// each backend's business; this is the part they share.
#include <cstdint>
#include <limits>
#include <optional>
#include <random>
#include <vector>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "turnrl/core/error.h"
#include "turnrl/kernels/evaluator.h"
#include "turnrl/kernels/cpu_protocol.h"  // encode, decode
#include "turnrl/kernels/hacking.h"
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
                                             size_t message_chars, EvalResult& r, bool call_marks = false) {
  if (worker.calls_since_start() >= max_calls) worker.stop();
  SandboxReply s = worker.call(request, call_marks);
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

// What checked_exchange found when the worker answered.
struct ExchangeOutcome {
  // Why the channel carried a frame that is not the worker's answer to the request ("" when the
  // reply is its answer): the caller rejects it (reject_forged_frame).
  std::string forged;
  std::string output;  // the worker's output note (output_note) for the reply
  std::vector<double> call_marks;  // SandboxReply::call_marks of the request (its ping has none)
  std::vector<MarkedLibraryUse> library_uses;  // SandboxReply::library_uses of the request
  std::vector<CodeSamples> code_samples;       // SandboxReply::code_samples of the request
  double sample_period_seconds = 0;            // SandboxReply::sample_period_seconds (0: not sampled)
  int64_t samples_lost = 0;                    // SandboxReply::samples_lost
  std::vector<int> densely_sampled_calls;      // SandboxReply::densely_sampled_calls
  double dense_sample_period_seconds = 0;      // SandboxReply::dense_sample_period_seconds
};

// One request and its reply, then a ping whose fresh nonce must come straight back: the reply is
// this request's and nothing else is queued on the channel. A reply that does not decode, answers
// another request (malformed(request, reply) says why it cannot be the answer, "" when it can), is
// followed by stray bytes, or is followed by anything but the pong is forged or stray (a candidate
// can write on the inherited channel). ping_after(reply) is false for a reply after which the
// worker exits. Both requests get fresh nonces here. Nullopt with r set when the sandbox failed
// (crash, timeout, limits). Restarts are the caller's, before the exchange: never between a
// request and its ping. call_marks: the request's call marks are taken (ExchangeOutcome::call_marks).
template <class Request, class Reply, class Malformed, class PingAfter>
std::optional<ExchangeOutcome> checked_exchange(SandboxWorker& worker, Request& request, Reply& reply, Request ping,
                                                size_t message_chars, EvalResult& r, const Malformed& malformed,
                                                const PingAfter& ping_after, bool call_marks = false) {
  const int64_t no_restart = std::numeric_limits<int64_t>::max();
  request.nonce = fresh_nonce();
  std::optional<SandboxReply> got =
      round_trip(worker, cpu_detail::encode(request), no_restart, message_chars, r, call_marks);
  if (!got) return std::nullopt;
  ExchangeOutcome out;
  out.output = output_note(*got);
  out.call_marks = std::move(got->call_marks);
  out.library_uses = std::move(got->library_uses);
  out.code_samples = std::move(got->code_samples);
  out.sample_period_seconds = got->sample_period_seconds;
  out.samples_lost = got->samples_lost;
  out.densely_sampled_calls = std::move(got->densely_sampled_calls);
  out.dense_sample_period_seconds = got->dense_sample_period_seconds;
  if (got->trailing_bytes > 0) {
    out.forged = fmt::format("{} byte(s) after the reply frame", got->trailing_bytes);
    return out;
  }
  try {
    reply = cpu_detail::decode<Reply>(got->payload);
  } catch (const Error& e) {
    out.forged = e.what();
    return out;
  }
  out.forged = malformed(request, reply);
  if (!out.forged.empty() || !ping_after(reply)) return out;
  ping.nonce = fresh_nonce();
  std::optional<SandboxReply> pong = round_trip(worker, cpu_detail::encode(ping), no_restart, message_chars, r);
  if (!pong) return std::nullopt;
  try {
    if (const std::string why = malformed(ping, cpu_detail::decode<Reply>(pong->payload)); !why.empty())
      out.forged = "ping: " + why;
  } catch (const Error& e) {
    out.forged = std::string("ping: ") + e.what();
  }
  return out;
}

// A frame that is not the worker's answer: the worker is killed (the next call gets a fresh one,
// and nothing it left on the channel reaches a later request) and the result is tampering. False,
// for the caller to return.
inline bool reject_forged_frame(SandboxWorker& worker, EvalResult& r, std::vector<HackFinding>& findings,
                                const std::string& why) {
  worker.stop();
  r.error = EvalError::hacking;
  add_once(findings, kHackTampering, "the worker's channel carried a frame that is not its answer (" + why + ")");
  return false;
}

}  // namespace turnrl::eval_detail
