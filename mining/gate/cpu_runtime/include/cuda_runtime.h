// cuda_runtime.h for kernel-skills' CPU executor: everything lives in ks_cpu.h (force-included by the build).
#pragma once
#include "../ks_cpu.h"
