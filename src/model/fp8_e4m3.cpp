#include "fp8_e4m3.h"

#include <cmath>
#include <limits>
#include <vector>

#include <torch/version.h>

#include "turnrl/core/error.h"

namespace turnrl::detail {

float e4m3_value(uint8_t code) {
  const int exponent = (code >> 3) & 15, mantissa = code & 7;
  if (exponent == 15 && mantissa == 7) return std::numeric_limits<float>::quiet_NaN();
  const float magnitude = exponent == 0 ? std::ldexp(float(mantissa) / 8.0f, -6)
                                        : std::ldexp(1.0f + float(mantissa) / 8.0f, exponent - 7);
  return (code & 0x80) ? -magnitude : magnitude;
}

namespace {

// Every code's value (float32 [256]), and the 126 midpoints between the 127 finite non-negative
// values in code order 0x00 .. 0x7E (float32; exact: a midpoint needs one more mantissa bit).
struct Tables {
  torch::Tensor values, midpoints;
};

const Tables& tables_on(const torch::Device& device) {
  static const Tables host = [] {
    std::vector<float> values(256), midpoints(126);
    for (int c = 0; c < 256; ++c) values[size_t(c)] = e4m3_value(uint8_t(c));
    for (int c = 0; c < 126; ++c) midpoints[size_t(c)] = (values[size_t(c)] + values[size_t(c) + 1]) / 2;
    return Tables{torch::tensor(values), torch::tensor(midpoints)};
  }();
  if (device.is_cpu()) return host;
  // One copy a device, kept: a captured CUDA graph may read it.
  thread_local std::vector<std::pair<torch::Device, Tables>> copies;
  for (const auto& [d, t] : copies)
    if (d == device) return t;
  copies.emplace_back(device, Tables{host.values.to(device), host.midpoints.to(device)});
  return copies.back().second;
}

}  // namespace

torch::Tensor to_e4m3(const torch::Tensor& x) {
  if (!x.is_floating_point()) fail("to_e4m3: x must be a floating-point tensor; got {}", c10::toString(x.scalar_type()));
  const Tables& t = tables_on(x.device());
  const torch::Tensor xf = x.to(torch::kFloat);
  const torch::Tensor magnitude = xf.abs().clamp_max(448.0f).contiguous();
  // mid[i - 1] < |x| <= mid[i]: code i is the nearest, or ties with i + 1 when |x| == mid[i].
  torch::Tensor code = torch::bucketize(magnitude, t.midpoints, /*out_int32=*/false, /*right=*/false);
  const torch::Tensor tie = code.lt(126) & magnitude.eq(t.midpoints.index_select(0, code.clamp_max(125).flatten()).view_as(code));
  code = torch::where(tie & code.remainder(2).eq(1), code + 1, code);
  code = code + torch::signbit(xf).to(torch::kLong) * 128;
  code = torch::where(torch::isnan(xf), torch::full_like(code, 0x7F), code);
  return code.to(torch::kByte);
}

torch::Tensor from_e4m3(const torch::Tensor& codes, torch::Dtype dtype) {
  if (codes.scalar_type() != torch::kByte)
    fail("from_e4m3: codes must be uint8 e4m3 codes; got {}", c10::toString(codes.scalar_type()));
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
  // LibTorch's own float8_e4m3fn (2.1 on) reads the same codes: one conversion kernel, exact like
  // the table, without the table's int64 index of every code (a prefill over an fp8 cache decodes
  // each layer's rows).
  return codes.view(torch::kFloat8_e4m3fn).to(dtype);
#else
  const Tables& t = tables_on(codes.device());
  return t.values.index_select(0, codes.flatten().to(torch::kLong)).view(codes.sizes()).to(dtype);
#endif
}

}  // namespace turnrl::detail
