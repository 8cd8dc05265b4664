#pragma once
// EvalRequest and EvalResult as bytes, for evaluators in other processes or on other machines
// (the remote backend's Redis streams). The encoding is explicit little-endian binary: a 4-byte
// magic with a version ("TRQ1" request, "TRS1" result), then every field in declaration order;
// strings and lists carry a 32-bit length. Decoding is strict: a wrong magic, a truncated or
// over-long message, an out-of-range enum or a length past the end throws turnrl::Error saying
// which field and which byte, so a malformed message is rejected, never half-read.
#include <string>

#include "turnrl/kernels/evaluator.h"

namespace turnrl {

std::string encode_request(const EvalRequest& request);
EvalRequest decode_request(const std::string& bytes);

std::string encode_result(const EvalResult& result);
EvalResult decode_result(const std::string& bytes);

}  // namespace turnrl
