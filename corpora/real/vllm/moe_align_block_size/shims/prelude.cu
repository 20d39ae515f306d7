// kernel-skills prelude (project code): the torch scalar types vLLM's kernels are written over,
// as the CUDA types they wrap, and the standard headers torch/extension.h brought in.
#include <cuda.h>  // CUDA_VERSION: vLLM enables its packed fp16 converters on it
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cstdint>
#include <type_traits>
namespace c10 {
using Half = __half;
using BFloat16 = __nv_bfloat16;
}  // namespace c10
