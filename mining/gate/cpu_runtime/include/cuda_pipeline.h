// cuda_pipeline.h for kernel-skills' CPU executor: the `__pipeline_*` primitives only
// (cuda::pipeline and memcpy_async are not emulated: cpu_toolchain reports them unsupported).
#pragma once
#include "cuda_pipeline_primitives.h"
