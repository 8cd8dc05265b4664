// The CUDA backend's launch contract and task set: plain text processing and LibTorch CPU, so
// these run everywhere (the GPU tests are in test_cuda_backend_cuda.cpp).
#include <catch2/catch.hpp>

#include "turnrl/kernels/backends.h"
#include "turnrl/kernels/cuda_backend.h"
#include "turnrl/kernels/cuda_launch.h"
#include "turnrl/kernels/cuda_tasks.h"

using namespace turnrl;

TEST_CASE("cuda tasks: eight tasks over three levels, signatures, dims and references agree") {
  const auto names = cuda_task_names();
  REQUIRE(names.size() >= 8);
  int levels[4] = {0, 0, 0, 0};
  for (const auto& n : names) {
    const CudaTask& t = cuda_task(n);
    ++levels[t.level];
    REQUIRE(t.shape_sets.size() >= 3);
    for (const auto& set : t.shape_sets) CHECK(t.dims(set).size() == t.dim_names.size());
    // The reference runs on any device: check it on the smallest extra shape on the CPU.
    std::vector<at::Tensor> in;
    for (const auto& s : t.shape_sets.back()) in.push_back(at::randn(s));
    auto out = t.reference(in);
    REQUIRE(out.size() == t.outputs.size());
    CHECK(at::isfinite(out[0]).all().item<bool>());
  }
  CHECK(levels[1] >= 2);
  CHECK(levels[2] >= 2);
  CHECK(levels[3] >= 2);
  CHECK(cuda_kernel_signature(cuda_task("relu_bias")) ==
        "extern \"C\" __global__ void turnrl_kernel(const float* x, const float* b, float* y, int rows, int cols)");
  CHECK(cuda_kernel_signature(cuda_task("matmul_bias_relu")) ==
        "extern \"C\" __global__ void turnrl_kernel(const float* x, const float* w, const float* b, float* y, int M, "
        "int N, int K)");
  CHECK(cuda_task("matmul_bias_relu").dims({{7, 5}, {5, 3}, {3}}) == std::vector<int64_t>{7, 3, 5});
  CHECK_THROWS_WITH(cuda_task("nope"), Catch::Contains("unknown name 'nope'") && Catch::Contains("softmax_rows"));
}

TEST_CASE("cuda launch: form, #define launch shape, grids, kernel names") {
  CHECK(cuda_candidate_form("extern \"C\" __global__ void turnrl_kernel(const float* x) {}") == CudaCandidateForm::kernel);
  CHECK(cuda_candidate_form("extern \"C\" int turnrl_launch(const float* const* in, float* const* out, const long long* "
                            "d, cudaStream_t s) { return 0; }") == CudaCandidateForm::launcher);
  CHECK(cuda_candidate_form("// turnrl_launch( is only mentioned in a comment\n__global__ void k() {}") ==
        CudaCandidateForm::kernel);

  const CudaLaunchShape d = parse_launch_shape("__global__ void turnrl_kernel() {}");
  CHECK((d.block_x == 256 && d.block_y == 1 && d.tile_x == 1 && d.tile_y == 1 && d.shared_bytes == 0));
  const CudaLaunchShape s = parse_launch_shape(
      "#define TURNRL_BLOCK_X 32\n  # define TURNRL_BLOCK_Y (8)\n#define TURNRL_TILE_X 4u\n#define TURNRL_SHARED_BYTES 65536\n"
      "#define TURNRL_MY_OWN 3\n// #define TURNRL_TILE_Y 99\n");
  CHECK((s.block_x == 32 && s.block_y == 8 && s.tile_x == 4 && s.tile_y == 1 && s.shared_bytes == 65536));
  CHECK_THROWS_WITH(parse_launch_shape("#define TURNRL_BLOCK_X 2048\n"), Catch::Contains("1 to 1024 threads"));
  CHECK_THROWS_WITH(parse_launch_shape("#define TURNRL_BLOCK_X (N * 2)\n"),
                    Catch::Contains("TURNRL_BLOCK_X") && Catch::Contains("decimal integer literal"));
  CHECK_THROWS_WITH(parse_launch_shape("#define TURNRL_SHARED_BYTES 300000\n"), Catch::Contains("TURNRL_SHARED_BYTES"));

  CudaLaunchShape shape;
  shape.block_x = 256, shape.tile_x = 4;
  const CudaGrid e = cuda_grid(cuda_task("relu_bias"), {33, 100}, shape);  // 3300 elements / 1024 a block
  CHECK((e.x == 4 && e.y == 1));
  shape = {32, 8, 1, 1, 0};
  const CudaGrid r = cuda_grid(cuda_task("softmax_rows"), {40, 77}, shape);  // 8 rows a block
  CHECK((r.x == 5 && r.y == 1));
  shape = {16, 16, 4, 4, 0};
  const CudaGrid m = cuda_grid(cuda_task("matmul_bias_relu"), {2048, 1000, 1024}, shape);  // 64 x 64 tiles
  CHECK((m.x == 16 && m.y == 32));
  shape = {32, 32, 1, 1, 0};
  CHECK_THROWS_WITH(cuda_grid(cuda_task("matmul_bias_relu"), {int64_t(1) << 22, 8, 8}, shape), Catch::Contains("65535"));

  const auto names = cuda_kernel_names(
      "template <int B> __global__ void __launch_bounds__(256) tile_kernel(float* y) {}\n"
      "extern \"C\" __global__ void turnrl_kernel(const float* x) {}\n/* __global__ void commented(int) */\n"
      "static __global__ void helper2 (int n) {}\n"
      "const char* note = \"__global__ void in_a_string(int)\";\n#if 0\n__global__ void disabled(int) {}\n#endif\n");
  CHECK(names == std::vector<std::string>{"tile_kernel", "turnrl_kernel", "helper2"});

  const std::vector<std::string> own = {"tile_kernel", "turnrl_kernel", "epilogue"};
  CHECK(is_own_kernel("turnrl_kernel", own));
  CHECK(is_own_kernel("_Z8epiloguePfPKfi", own));                       // mangled C++ kernel
  CHECK(is_own_kernel("void tile_kernel<128>(float*)", own));            // demangled template
  CHECK(is_own_kernel("void mine::epilogue(float*, int)", own));          // the candidate's namespace
  CHECK_FALSE(is_own_kernel("void at::native::epilogue<float>(float*)", own));  // a library's
  CHECK_FALSE(is_own_kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize128x128x32", own));
  CHECK_FALSE(is_own_kernel("memcpy", own));
}

TEST_CASE("cuda backend: without CUDA or a GPU it refuses with a clear message, the config names it") {
  const auto built = built_evaluator_backends();
  const bool has_cuda = std::find(built.begin(), built.end(), "cuda") != built.end();
  if (has_cuda && visible_cuda_devices() > 0) {
    WARN("a GPU is visible: the refusal path is not reachable here (test_eval_cuda covers the backend)");
    return;
  }
  EvaluatorConfig c;
  c.backend = "cuda";
  CHECK_THROWS_WITH(make_evaluator(c), Catch::Contains("cuda"));
}
