#pragma once
// The KV cache's 8-bit float: e4m3 "fn" (OCP FP8 E4M3, torch.float8_e4m3fn, CUDA's __NV_E4M3):
// a sign, 4 exponent bits (bias 7) and 3 mantissa bits, no infinities, codes 0x7F and 0xFF NaN,
// largest finite value 448, subnormals m / 8 * 2^-6. Codes are kept as uint8 so that both
// LibTorch 1.13 (which has no float8 dtype) and later builds hold them, and the GPU kernels read
// them with the hardware's conversions (decode_attention.cu), which round the same way.
#include <torch/types.h>

namespace turnrl::detail {

// The e4m3 codes (uint8, x's shape and device) of x rounded to nearest, ties to the even code,
// saturated to +-448 (CUDA's __NV_SATFINITE: no value becomes NaN but NaN; NaN -> 0x7F); the sign
// of a zero or of a value that rounds to zero is kept (-0.0 -> 0x80).
torch::Tensor to_e4m3(const torch::Tensor& x);

// The values of e4m3 codes (uint8) in `dtype`: exact in float32, float16 and bfloat16, which all
// hold 3 mantissa bits and exponents -9 .. 8. By a 256-entry table, or from LibTorch 2.1 on by its
// own float8_e4m3fn dtype, which reads the same codes.
torch::Tensor from_e4m3(const torch::Tensor& codes, torch::Dtype dtype);

// The value of one code, as float (NaN for 0x7F and 0xFF): the table the functions above use.
float e4m3_value(uint8_t code);

}  // namespace turnrl::detail
