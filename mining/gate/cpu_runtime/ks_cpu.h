// ks_cpu.h: CUDA C++ on the CPU (kernel-skills' CPU executor).
//
// Force-included (g++ -include ks_cpu.h) into every CPU build of a kernel and its harness.
// Each CUDA thread runs as a fiber; one OS thread runs one block at a time, fibers switch
// only at sync points (__syncthreads, warp collectives, spin-waits). The non-template part of
// the runtime (scheduler, fibers, memory checker) lives in ks_cpu_runtime.cpp.
//
// Build modes (set by mining/gate/cpu_toolchain.py):
//   KS_MODE_CHECK  kernel TU compiled with -fsanitize=thread, linked WITHOUT libtsan: the runtime
//                  defines the __tsan_* callbacks and uses them to find races and bad accesses.
//   KS_MODE_ASAN   kernel TU compiled with -fsanitize=address; the runtime annotates fiber switches.
//
// Source rewrites done by mining/gate/cpu_rewrite.py (line numbers kept):
//   k<<<g, b, smem, stream>>>(args)  ->  ::ks::launch("k", __FILE__, __LINE__, g, b, smem, stream,
//                                          [&](auto... ks_a) { k(ks_a...); }, args)
//   __shared__ T x[N];               ->  auto& x = ::ks::shared_var<T[N], __COUNTER__>(...);
//   extern __shared__ T x[];         ->  auto x = ::ks::dynamic_shared<T>();
#ifndef KS_CPU_H
#define KS_CPU_H

#if !defined(KS_MODE_CHECK) && !defined(KS_MODE_ASAN)
#define KS_MODE_CHECK 1
#endif
#ifndef KS_CPU_EXECUTOR
#define KS_CPU_EXECUTOR 1
#endif
#ifndef __CUDACC__
#define __CUDACC__ 1
#endif

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <climits>
#include <cfloat>
#include <cmath>
#include <math.h>
#include <limits>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>
#include <memory>  // before __noinline__ is defined: libstdc++ spells __attribute__((__noinline__))

// ---------------------------------------------------------------------------------------------
// Qualifiers and attributes
// ---------------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
#define __maxnreg__(...)
#define __grid_constant__
#define __inline_hint__
// Block-scope __shared__ declarations are rewritten by cpu_rewrite.py. Anything left over (a
// namespace-scope __shared__, one inside a macro or an included header) falls back to per-OS-thread
// storage: functionally right (a block's fibers share one OS thread) but not poisoned or checked.
#define __shared__ thread_local
#if !defined(__has_builtin) || !__has_builtin(__builtin_assume)
#define __builtin_assume(x) ((void)0)
#endif
#define __assume(x) ((void)0)

#define KS_NOSAN __attribute__((no_sanitize_thread, no_sanitize_address))

// ---------------------------------------------------------------------------------------------
// Vector types
// ---------------------------------------------------------------------------------------------
#define KS_VEC1(T, N, A) struct __attribute__((aligned(A))) N##1 { T x; };
#define KS_VEC2(T, N, A) struct __attribute__((aligned(A))) N##2 { T x, y; };
#define KS_VEC3(T, N) struct N##3 { T x, y, z; };
#define KS_VEC4(T, N, A) struct __attribute__((aligned(A))) N##4 { T x, y, z, w; };
#define KS_VEC_ALL(T, N, A1, A2, A4) KS_VEC1(T, N, A1) KS_VEC2(T, N, A2) KS_VEC3(T, N) KS_VEC4(T, N, A4)
KS_VEC_ALL(signed char, char, 1, 2, 4)
KS_VEC_ALL(unsigned char, uchar, 1, 2, 4)
KS_VEC_ALL(short, short, 2, 4, 8)
KS_VEC_ALL(unsigned short, ushort, 2, 4, 8)
KS_VEC_ALL(int, int, 4, 8, 16)
KS_VEC_ALL(unsigned int, uint, 4, 8, 16)
KS_VEC_ALL(long, long, 8, 16, 16)
KS_VEC_ALL(unsigned long, ulong, 8, 16, 16)
KS_VEC_ALL(long long, longlong, 8, 16, 16)
KS_VEC_ALL(unsigned long long, ulonglong, 8, 16, 16)
KS_VEC_ALL(float, float, 4, 8, 16)
KS_VEC_ALL(double, double, 8, 16, 16)
#undef KS_VEC1
#undef KS_VEC2
#undef KS_VEC3
#undef KS_VEC4
#undef KS_VEC_ALL

#define KS_MAKE1(T, N) inline N##1 make_##N##1(T x) { N##1 r; r.x = x; return r; }
#define KS_MAKE2(T, N) inline N##2 make_##N##2(T x, T y) { N##2 r; r.x = x; r.y = y; return r; }
#define KS_MAKE3(T, N) inline N##3 make_##N##3(T x, T y, T z) { N##3 r; r.x = x; r.y = y; r.z = z; return r; }
#define KS_MAKE4(T, N) \
    inline N##4 make_##N##4(T x, T y, T z, T w) { N##4 r; r.x = x; r.y = y; r.z = z; r.w = w; return r; }
#define KS_MAKE_ALL(T, N) KS_MAKE1(T, N) KS_MAKE2(T, N) KS_MAKE3(T, N) KS_MAKE4(T, N)
KS_MAKE_ALL(signed char, char)
KS_MAKE_ALL(unsigned char, uchar)
KS_MAKE_ALL(short, short)
KS_MAKE_ALL(unsigned short, ushort)
KS_MAKE_ALL(int, int)
KS_MAKE_ALL(unsigned int, uint)
KS_MAKE_ALL(long, long)
KS_MAKE_ALL(unsigned long, ulong)
KS_MAKE_ALL(long long, longlong)
KS_MAKE_ALL(unsigned long long, ulonglong)
KS_MAKE_ALL(float, float)
KS_MAKE_ALL(double, double)
#undef KS_MAKE1
#undef KS_MAKE2
#undef KS_MAKE3
#undef KS_MAKE4
#undef KS_MAKE_ALL

struct dim3 {
    unsigned int x, y, z;
    constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
    constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
    constexpr operator uint3() const { return uint3{x, y, z}; }
};

constexpr int warpSize = 32;

// ---------------------------------------------------------------------------------------------
// CUDA runtime types
// ---------------------------------------------------------------------------------------------
enum cudaError {
    cudaSuccess = 0,
    cudaErrorInvalidValue = 1,
    cudaErrorMemoryAllocation = 2,
    cudaErrorInitializationError = 3,
    cudaErrorInvalidConfiguration = 9,
    cudaErrorInvalidSymbol = 13,
    cudaErrorInvalidDevicePointer = 17,
    cudaErrorInvalidMemcpyDirection = 21,
    cudaErrorInvalidResourceHandle = 400,
    cudaErrorNoDevice = 100,
    cudaErrorInvalidDevice = 101,
    cudaErrorNotReady = 600,
    cudaErrorIllegalAddress = 700,
    cudaErrorLaunchFailure = 719,
    cudaErrorNotSupported = 801,
    cudaErrorUnknown = 999
};
typedef enum cudaError cudaError_t;
typedef enum cudaError CUresult;
#define CUDA_SUCCESS cudaSuccess

enum cudaMemcpyKind {
    cudaMemcpyHostToHost = 0,
    cudaMemcpyHostToDevice = 1,
    cudaMemcpyDeviceToHost = 2,
    cudaMemcpyDeviceToDevice = 3,
    cudaMemcpyDefault = 4
};

struct CUstream_st;
typedef CUstream_st* cudaStream_t;
struct CUevent_st;
typedef CUevent_st* cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02
#define CUDART_VERSION 13000
#ifndef CUDA_VERSION
#define CUDA_VERSION 13000
#endif

enum cudaFuncAttribute {
    cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
    cudaFuncAttributePreferredSharedMemoryCarveout = 9,
    cudaFuncAttributeMax
};
enum cudaFuncCache { cudaFuncCachePreferNone = 0, cudaFuncCachePreferShared = 1, cudaFuncCachePreferL1 = 2,
                     cudaFuncCachePreferEqual = 3 };
enum cudaSharedMemConfig { cudaSharedMemBankSizeDefault = 0, cudaSharedMemBankSizeFourByte = 1,
                           cudaSharedMemBankSizeEightByte = 2 };
#define cudaSharedmemCarveoutDefault (-1)
#define cudaSharedmemCarveoutMaxShared 100
#define cudaSharedmemCarveoutMaxL1 0

enum cudaDeviceAttr {
    cudaDevAttrMaxThreadsPerBlock = 1,
    cudaDevAttrMaxBlockDimX = 2,
    cudaDevAttrMaxBlockDimY = 3,
    cudaDevAttrMaxBlockDimZ = 4,
    cudaDevAttrMaxGridDimX = 5,
    cudaDevAttrMaxGridDimY = 6,
    cudaDevAttrMaxGridDimZ = 7,
    cudaDevAttrMaxSharedMemoryPerBlock = 8,
    cudaDevAttrTotalConstantMemory = 9,
    cudaDevAttrWarpSize = 10,
    cudaDevAttrMaxPitch = 11,
    cudaDevAttrMaxRegistersPerBlock = 12,
    cudaDevAttrClockRate = 13,
    cudaDevAttrMultiProcessorCount = 16,
    cudaDevAttrMemoryClockRate = 36,
    cudaDevAttrGlobalMemoryBusWidth = 37,
    cudaDevAttrL2CacheSize = 38,
    cudaDevAttrMaxThreadsPerMultiProcessor = 39,
    cudaDevAttrComputeCapabilityMajor = 75,
    cudaDevAttrComputeCapabilityMinor = 76,
    cudaDevAttrMaxSharedMemoryPerMultiprocessor = 81,
    cudaDevAttrMaxRegistersPerMultiprocessor = 82,
    cudaDevAttrCooperativeLaunch = 95,
    cudaDevAttrMaxSharedMemoryPerBlockOptin = 97,
    cudaDevAttrMaxBlocksPerMultiprocessor = 106
};

struct cudaDeviceProp {
    char name[256];
    size_t totalGlobalMem;
    size_t sharedMemPerBlock;
    int regsPerBlock;
    int warpSize;
    size_t memPitch;
    int maxThreadsPerBlock;
    int maxThreadsDim[3];
    int maxGridSize[3];
    int clockRate;
    size_t totalConstMem;
    int major;
    int minor;
    size_t textureAlignment;
    int deviceOverlap;
    int multiProcessorCount;
    int kernelExecTimeoutEnabled;
    int integrated;
    int canMapHostMemory;
    int computeMode;
    int concurrentKernels;
    int ECCEnabled;
    int pciBusID;
    int pciDeviceID;
    int asyncEngineCount;
    int unifiedAddressing;
    int memoryClockRate;
    int memoryBusWidth;
    int l2CacheSize;
    int persistingL2CacheMaxSize;
    int maxThreadsPerMultiProcessor;
    int streamPrioritiesSupported;
    size_t sharedMemPerMultiprocessor;
    int regsPerMultiprocessor;
    int managedMemory;
    int isMultiGpuBoard;
    int cooperativeLaunch;
    size_t sharedMemPerBlockOptin;
    int maxBlocksPerMultiProcessor;
    size_t reservedSharedMemPerBlock;
};

struct cudaFuncAttributes {
    size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
    int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion, cacheModeCA, maxDynamicSharedSizeBytes,
        preferredShmemCarveout;
};

// ---------------------------------------------------------------------------------------------
// Runtime interface (implemented in ks_cpu_runtime.cpp)
// ---------------------------------------------------------------------------------------------
// Built-in variables: threadIdx/blockIdx are per OS thread and rewritten by the scheduler at
// every fiber switch; blockDim/gridDim are per launch (launches are synchronous).
extern __thread uint3 threadIdx;
extern __thread uint3 blockIdx;
extern dim3 blockDim;
extern dim3 gridDim;

namespace ks {

enum WarpOp : int {
    OP_SYNCWARP = 0, OP_SHFL_IDX, OP_SHFL_UP, OP_SHFL_DOWN, OP_SHFL_XOR, OP_BALLOT, OP_ANY, OP_ALL,
    OP_MATCH_ANY, OP_MATCH_ALL, OP_RED_ADD, OP_RED_MIN, OP_RED_MAX, OP_RED_MIN_S, OP_RED_MAX_S,
    OP_RED_AND, OP_RED_OR, OP_RED_XOR
};

struct LaunchInfo {
    const char* kernel;
    const char* file;
    int line;
    dim3 grid;
    dim3 block;
    size_t smem;
    void (*invoke)(void* ctx);
    void* ctx;
    size_t ctx_size;
};

void run_launch(const LaunchInfo& info);
void syncthreads(const char* file, int line);
int syncthreads_reduce(int op, int pred, const char* file, int line);  // 0 count, 1 and, 2 or
uint64_t warp_collective(int op, unsigned mask, uint64_t value, unsigned size, int arg, int width,
                         const char* file, int line);
unsigned activemask(const char* file, int line);
void threadfence();
void yield_spin();
void* shared_alloc(size_t size, size_t align, const char* file, int line, const char* name);
void* dynamic_shared_base();
int register_dynamic_shared_setter(void (*setter)(void*));
[[noreturn]] void fail(const char* kind, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
extern __thread uint64_t t_block_serial;  // changes at every block start on this OS thread

// ---- kernel launch --------------------------------------------------------------------------
template <class F, class Tup>
struct LaunchCtx {
    F body;
    Tup args;
};

template <class Ctx>
void invoke_launch(void* p) {
    Ctx* c = static_cast<Ctx*>(p);
    std::apply(c->body, c->args);  // each thread gets its own copy of every argument
}

template <class F, class... A>
void launch(const char* kernel, const char* file, int line, dim3 grid, dim3 block, size_t smem,
            cudaStream_t stream, F&& body, A&&... args) {
    (void)stream;
    using Ctx = LaunchCtx<std::decay_t<F>, std::tuple<std::decay_t<A>...>>;
    Ctx ctx{std::forward<F>(body), std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
    LaunchInfo info{kernel, file, line, grid, block, smem, &invoke_launch<Ctx>, &ctx, sizeof(ctx)};
    run_launch(info);
}

// ---- shared memory ---------------------------------------------------------------------------
struct SharedSlot {
    uint64_t serial;
    void* ptr;
};

// One slot per declaration site and OS thread; (re)allocated in the block's arena the first time
// a thread of a new block executes the declaration.
template <class T, int Key>
KS_NOSAN __attribute__((noinline)) T& shared_var(const char* file, int line, const char* name) {
    static thread_local SharedSlot slot{0, nullptr};
    if (slot.serial != t_block_serial) {
        slot.ptr = shared_alloc(sizeof(T), alignof(T), file, line, name);
        slot.serial = t_block_serial;
    }
    return *static_cast<T*>(slot.ptr);
}

template <class T>
inline T* dynamic_shared() {
    return reinterpret_cast<T*>(dynamic_shared_base());
}

// reinterpret_cast / C-style casts to pointers of CUDA vector types are rewritten to vcast, so a
// misaligned vector access (undefined on the GPU, where LDG.128 faults) is reported at the cast
// even when g++ later splits the 16-byte copy into scalar loads.
void misaligned_cast(const char* file, int line, const void* p, size_t align);
template <class P, class T>
inline P vcast(const char* file, int line, T v) {
    if constexpr (std::is_pointer<T>::value && std::is_pointer<P>::value) {
        using E = std::remove_cv_t<std::remove_pointer_t<P>>;
        if constexpr (!std::is_void<E>::value) {
            if (((uintptr_t)v & (alignof(E) - 1)) != 0) misaligned_cast(file, line, (const void*)v, alignof(E));
        }
        return (P)v;
    } else {
        return reinterpret_cast<P>(v);
    }
}

// ---- warp collectives -----------------------------------------------------------------------
template <class T>
inline uint64_t to_bits(const T& v) {
    static_assert(std::is_trivially_copyable<T>::value && sizeof(T) <= 8,
                  "warp shuffle: the value must be a trivially copyable type of at most 8 bytes");
    uint64_t b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
inline T from_bits(uint64_t b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}
template <int Op, class T>
inline T shfl(const char* file, int line, unsigned mask, T var, int arg, int width = 32) {
    return from_bits<T>(warp_collective(Op, mask, to_bits(var), sizeof(T), arg, width, file, line));
}
inline void syncwarp(const char* file, int line, unsigned mask = 0xffffffffu) {
    warp_collective(OP_SYNCWARP, mask, 0, 4, 0, 32, file, line);
}
inline unsigned ballot(const char* file, int line, unsigned mask, int pred) {
    return (unsigned)warp_collective(OP_BALLOT, mask, pred != 0, 4, 0, 32, file, line);
}
inline int any(const char* file, int line, unsigned mask, int pred) {
    return (int)warp_collective(OP_ANY, mask, pred != 0, 4, 0, 32, file, line);
}
inline int all(const char* file, int line, unsigned mask, int pred) {
    return (int)warp_collective(OP_ALL, mask, pred != 0, 4, 0, 32, file, line);
}
template <class T>
inline unsigned match_any(const char* file, int line, unsigned mask, T value) {
    return (unsigned)warp_collective(OP_MATCH_ANY, mask, to_bits(value), sizeof(T), 0, 32, file, line);
}
template <class T>
inline unsigned match_all(const char* file, int line, unsigned mask, T value, int* pred) {
    unsigned r = (unsigned)warp_collective(OP_MATCH_ALL, mask, to_bits(value), sizeof(T), 0, 32, file, line);
    *pred = r != 0;
    return r;
}
template <int Op, class T>
inline T reduce_sync(const char* file, int line, unsigned mask, T value) {
    static_assert(std::is_integral<T>::value && sizeof(T) == 4, "__reduce_*_sync takes int or unsigned");
    int op = Op;
    if (std::is_signed<T>::value && Op == OP_RED_MIN) op = OP_RED_MIN_S;
    if (std::is_signed<T>::value && Op == OP_RED_MAX) op = OP_RED_MAX_S;
    return (T)(uint32_t)warp_collective(op, mask, (uint32_t)value, 4, 0, 32, file, line);
}

}  // namespace ks

// ---------------------------------------------------------------------------------------------
// Synchronization and warp intrinsics (macros so the site's file:line is known)
// ---------------------------------------------------------------------------------------------
#define __syncthreads() ::ks::syncthreads(__FILE__, __LINE__)
#define __syncthreads_count(p) ::ks::syncthreads_reduce(0, (p), __FILE__, __LINE__)
#define __syncthreads_and(p) ::ks::syncthreads_reduce(1, (p), __FILE__, __LINE__)
#define __syncthreads_or(p) ::ks::syncthreads_reduce(2, (p), __FILE__, __LINE__)
#define __syncwarp(...) ::ks::syncwarp(__FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)
#define __shfl_sync(...) ::ks::shfl<::ks::OP_SHFL_IDX>(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_up_sync(...) ::ks::shfl<::ks::OP_SHFL_UP>(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_down_sync(...) ::ks::shfl<::ks::OP_SHFL_DOWN>(__FILE__, __LINE__, __VA_ARGS__)
#define __shfl_xor_sync(...) ::ks::shfl<::ks::OP_SHFL_XOR>(__FILE__, __LINE__, __VA_ARGS__)
#define __ballot_sync(...) ::ks::ballot(__FILE__, __LINE__, __VA_ARGS__)
#define __any_sync(...) ::ks::any(__FILE__, __LINE__, __VA_ARGS__)
#define __all_sync(...) ::ks::all(__FILE__, __LINE__, __VA_ARGS__)
#define __match_any_sync(...) ::ks::match_any(__FILE__, __LINE__, __VA_ARGS__)
#define __match_all_sync(...) ::ks::match_all(__FILE__, __LINE__, __VA_ARGS__)
#define __reduce_add_sync(...) ::ks::reduce_sync<::ks::OP_RED_ADD>(__FILE__, __LINE__, __VA_ARGS__)
#define __reduce_min_sync(...) ::ks::reduce_sync<::ks::OP_RED_MIN>(__FILE__, __LINE__, __VA_ARGS__)
#define __reduce_max_sync(...) ::ks::reduce_sync<::ks::OP_RED_MAX>(__FILE__, __LINE__, __VA_ARGS__)
#define __reduce_and_sync(...) ::ks::reduce_sync<::ks::OP_RED_AND>(__FILE__, __LINE__, __VA_ARGS__)
#define __reduce_or_sync(...) ::ks::reduce_sync<::ks::OP_RED_OR>(__FILE__, __LINE__, __VA_ARGS__)
#define __reduce_xor_sync(...) ::ks::reduce_sync<::ks::OP_RED_XOR>(__FILE__, __LINE__, __VA_ARGS__)
#define __activemask() ::ks::activemask(__FILE__, __LINE__)
#define __threadfence() ::ks::threadfence()
#define __threadfence_system() ::ks::threadfence()
#define __threadfence_block() __atomic_signal_fence(__ATOMIC_SEQ_CST)

inline void __nanosleep(unsigned) { ::ks::yield_spin(); }
[[noreturn]] inline void __trap() { std::abort(); }
[[noreturn]] inline void __brkpt() { std::abort(); }
inline long long clock64() { return (long long)__builtin_ia32_rdtsc(); }

// ---------------------------------------------------------------------------------------------
// Atomics (relaxed, like CUDA's). In check mode the instrumentation turns every __atomic builtin
// into a __tsan_atomic* call, which the runtime checks (bounds) and performs.
// ---------------------------------------------------------------------------------------------
#define KS_R __ATOMIC_RELAXED
#define KS_ATOMIC_INT_OPS(T)                                                                           \
    inline T atomicAdd(T* p, T v) { return __atomic_fetch_add(p, v, KS_R); }                          \
    inline T atomicSub(T* p, T v) { return __atomic_fetch_sub(p, v, KS_R); }                          \
    inline T atomicExch(T* p, T v) { return __atomic_exchange_n(p, v, KS_R); }                        \
    inline T atomicAnd(T* p, T v) { return __atomic_fetch_and(p, v, KS_R); }                          \
    inline T atomicOr(T* p, T v) { return __atomic_fetch_or(p, v, KS_R); }                            \
    inline T atomicXor(T* p, T v) { return __atomic_fetch_xor(p, v, KS_R); }                          \
    inline T atomicCAS(T* p, T cmp, T v) {                                                            \
        __atomic_compare_exchange_n(p, &cmp, v, false, KS_R, KS_R);                                   \
        return cmp;                                                                                   \
    }                                                                                                 \
    inline T atomicMax(T* p, T v) {                                                                   \
        T old = __atomic_load_n(p, KS_R);                                                             \
        while (old < v && !__atomic_compare_exchange_n(p, &old, v, true, KS_R, KS_R)) {}              \
        return old;                                                                                   \
    }                                                                                                 \
    inline T atomicMin(T* p, T v) {                                                                   \
        T old = __atomic_load_n(p, KS_R);                                                             \
        while (old > v && !__atomic_compare_exchange_n(p, &old, v, true, KS_R, KS_R)) {}              \
        return old;                                                                                   \
    }
KS_ATOMIC_INT_OPS(int)
KS_ATOMIC_INT_OPS(unsigned int)
KS_ATOMIC_INT_OPS(unsigned long long)
KS_ATOMIC_INT_OPS(long long)
#undef KS_ATOMIC_INT_OPS
inline unsigned short atomicCAS(unsigned short* p, unsigned short cmp, unsigned short v) {
    __atomic_compare_exchange_n(p, &cmp, v, false, KS_R, KS_R);
    return cmp;
}
inline unsigned atomicInc(unsigned* p, unsigned limit) {
    unsigned old = __atomic_load_n(p, KS_R);
    while (!__atomic_compare_exchange_n(p, &old, old >= limit ? 0u : old + 1u, true, KS_R, KS_R)) {}
    return old;
}
inline unsigned atomicDec(unsigned* p, unsigned limit) {
    unsigned old = __atomic_load_n(p, KS_R);
    while (!__atomic_compare_exchange_n(p, &old, (old == 0 || old > limit) ? limit : old - 1u, true, KS_R, KS_R)) {}
    return old;
}
template <class T, class U, class F>
inline T ks_atomic_cas_loop(T* p, F op) {
    static_assert(sizeof(T) == sizeof(U), "");
    U* u = reinterpret_cast<U*>(p);
    U old = __atomic_load_n(u, KS_R), nw;
    do {
        T cur;
        std::memcpy(&cur, &old, sizeof(T));
        T next = op(cur);
        std::memcpy(&nw, &next, sizeof(T));
    } while (!__atomic_compare_exchange_n(u, &old, nw, true, KS_R, KS_R));
    T r;
    std::memcpy(&r, &old, sizeof(T));
    return r;
}
inline float atomicAdd(float* p, float v) { return ks_atomic_cas_loop<float, uint32_t>(p, [v](float c) { return c + v; }); }
inline double atomicAdd(double* p, double v) { return ks_atomic_cas_loop<double, uint64_t>(p, [v](double c) { return c + v; }); }
inline float atomicSub(float* p, float v) { return ks_atomic_cas_loop<float, uint32_t>(p, [v](float c) { return c - v; }); }
inline float atomicExch(float* p, float v) { return ks_atomic_cas_loop<float, uint32_t>(p, [v](float) { return v; }); }
inline double atomicExch(double* p, double v) { return ks_atomic_cas_loop<double, uint64_t>(p, [v](double) { return v; }); }
inline float atomicMax(float* p, float v) { return ks_atomic_cas_loop<float, uint32_t>(p, [v](float c) { return fmaxf(c, v); }); }
inline float atomicMin(float* p, float v) { return ks_atomic_cas_loop<float, uint32_t>(p, [v](float c) { return fminf(c, v); }); }
inline double atomicMax(double* p, double v) { return ks_atomic_cas_loop<double, uint64_t>(p, [v](double c) { return fmax(c, v); }); }
inline double atomicMin(double* p, double v) { return ks_atomic_cas_loop<double, uint64_t>(p, [v](double c) { return fmin(c, v); }); }
inline float2 atomicAdd(float2* p, float2 v) {
    float2 r;
    r.x = atomicAdd(&p->x, v.x);
    r.y = atomicAdd(&p->y, v.y);
    return r;
}
inline float4 atomicAdd(float4* p, float4 v) {
    float4 r;
    r.x = atomicAdd(&p->x, v.x);
    r.y = atomicAdd(&p->y, v.y);
    r.z = atomicAdd(&p->z, v.z);
    r.w = atomicAdd(&p->w, v.w);
    return r;
}
// Scoped variants behave like the device-wide ones here.
#define KS_SCOPED(name)                                                                                \
    template <class... A> inline auto name##_block(A... a) -> decltype(name(a...)) { return name(a...); } \
    template <class... A> inline auto name##_system(A... a) -> decltype(name(a...)) { return name(a...); }
KS_SCOPED(atomicAdd)
KS_SCOPED(atomicSub)
KS_SCOPED(atomicExch)
KS_SCOPED(atomicMax)
KS_SCOPED(atomicMin)
KS_SCOPED(atomicCAS)
KS_SCOPED(atomicAnd)
KS_SCOPED(atomicOr)
KS_SCOPED(atomicXor)
KS_SCOPED(atomicInc)
KS_SCOPED(atomicDec)
#undef KS_SCOPED

// ---------------------------------------------------------------------------------------------
// Bit casts, integer intrinsics
// ---------------------------------------------------------------------------------------------
template <class To, class From>
inline To ks_bitcast(const From& f) {
    static_assert(sizeof(To) == sizeof(From), "");
    To t;
    std::memcpy(&t, &f, sizeof(To));
    return t;
}
inline float __int_as_float(int x) { return ks_bitcast<float>(x); }
inline int __float_as_int(float x) { return ks_bitcast<int>(x); }
inline float __uint_as_float(unsigned x) { return ks_bitcast<float>(x); }
inline unsigned __float_as_uint(float x) { return ks_bitcast<unsigned>(x); }
inline double __longlong_as_double(long long x) { return ks_bitcast<double>(x); }
inline long long __double_as_longlong(double x) { return ks_bitcast<long long>(x); }
inline int __double2hiint(double x) { return (int)(ks_bitcast<unsigned long long>(x) >> 32); }
inline int __double2loint(double x) { return (int)(unsigned)ks_bitcast<unsigned long long>(x); }
inline double __hiloint2double(int hi, int lo) {
    return ks_bitcast<double>(((unsigned long long)(unsigned)hi << 32) | (unsigned)lo);
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz((unsigned)x); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
    x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
    x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
    x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
    return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
    return ((unsigned long long)__brev((unsigned)x) << 32) | __brev((unsigned)(x >> 32));
}
inline int __mul24(int x, int y) {
    return (int)(((long long)((x << 8) >> 8) * (long long)((y << 8) >> 8)) & 0xffffffffLL);
}
inline unsigned __umul24(unsigned x, unsigned y) { return (x & 0xffffffu) * (y & 0xffffffu); }
inline int __mulhi(int x, int y) { return (int)(((long long)x * y) >> 32); }
inline unsigned __umulhi(unsigned x, unsigned y) { return (unsigned)(((unsigned long long)x * y) >> 32); }
inline long long __mul64hi(long long x, long long y) { return (long long)(((__int128)x * y) >> 64); }
inline unsigned long long __umul64hi(unsigned long long x, unsigned long long y) {
    return (unsigned long long)(((unsigned __int128)x * y) >> 64);
}
inline int __hadd(int x, int y) { return (int)(((long long)x + y) >> 1); }
inline int __rhadd(int x, int y) { return (int)(((long long)x + y + 1) >> 1); }
inline unsigned __uhadd(unsigned x, unsigned y) { return (unsigned)(((unsigned long long)x + y) >> 1); }
inline unsigned __urhadd(unsigned x, unsigned y) { return (unsigned)(((unsigned long long)x + y + 1) >> 1); }
inline unsigned __sad(int x, int y, unsigned z) { return z + (unsigned)(x > y ? x - y : y - x); }
inline unsigned __usad(unsigned x, unsigned y, unsigned z) { return z + (x > y ? x - y : y - x); }
inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    unsigned long long v = ((unsigned long long)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; ++i) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xff) << (8 * i);
    return r;
}
inline unsigned __funnelshift_l(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)((v << (s & 31)) >> 32);
}
inline unsigned __funnelshift_lc(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)((v << (s > 32 ? 32 : s)) >> 32);
}
inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (s & 31));
}
inline unsigned __funnelshift_rc(unsigned lo, unsigned hi, unsigned s) {
    unsigned long long v = ((unsigned long long)hi << 32) | lo;
    return (unsigned)(v >> (s > 32 ? 32 : s));
}

// min / max: CUDA's global overloads (same-type ones beat std::min under `using namespace std`).
#define KS_MINMAX(T)                                                    \
    inline T min(T a, T b) { return b < a ? b : a; }                    \
    inline T max(T a, T b) { return a < b ? b : a; }
KS_MINMAX(int)
KS_MINMAX(unsigned int)
KS_MINMAX(long)
KS_MINMAX(unsigned long)
KS_MINMAX(long long)
KS_MINMAX(unsigned long long)
#undef KS_MINMAX
inline float min(float a, float b) { return fminf(a, b); }
inline float max(float a, float b) { return fmaxf(a, b); }
inline double min(double a, double b) { return fmin(a, b); }
inline double max(double a, double b) { return fmax(a, b); }
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value &&
                                   !std::is_same<A, B>::value>>
inline std::common_type_t<A, B> min(A a, B b) {
    return min((std::common_type_t<A, B>)a, (std::common_type_t<A, B>)b);
}
template <class A, class B,
          class = std::enable_if_t<std::is_arithmetic<A>::value && std::is_arithmetic<B>::value &&
                                   !std::is_same<A, B>::value>>
inline std::common_type_t<A, B> max(A a, B b) {
    return max((std::common_type_t<A, B>)a, (std::common_type_t<A, B>)b);
}
inline unsigned umin(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned umax(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long llmin(long long a, long long b) { return a < b ? a : b; }
inline long long llmax(long long a, long long b) { return a > b ? a : b; }
inline unsigned long long ullmin(unsigned long long a, unsigned long long b) { return a < b ? a : b; }
inline unsigned long long ullmax(unsigned long long a, unsigned long long b) { return a > b ? a : b; }

// ---------------------------------------------------------------------------------------------
// Floating-point intrinsics (computed at full precision on the CPU)
// ---------------------------------------------------------------------------------------------
inline float __expf(float x) { return expf(x); }
inline float __exp10f(float x) { return exp10f(x); }
inline float __logf(float x) { return logf(x); }
inline float __log2f(float x) { return log2f(x); }
inline float __log10f(float x) { return log10f(x); }
inline float __powf(float x, float y) { return powf(x, y); }
inline float __sinf(float x) { return sinf(x); }
inline float __cosf(float x) { return cosf(x); }
inline float __tanf(float x) { return tanf(x); }
inline void __sincosf(float x, float* s, float* c) { *s = sinf(x); *c = cosf(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __frcp_rz(float x) { return 1.0f / x; }
inline float __frsqrt_rn(float x) { return 1.0f / sqrtf(x); }
inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
inline double rsqrt(double x) { return 1.0 / sqrt(x); }
inline float rcbrtf(float x) { return 1.0f / cbrtf(x); }
inline double rcbrt(double x) { return 1.0 / cbrt(x); }
inline float __fsqrt_rn(float x) { return sqrtf(x); }
inline float __fsqrt_rz(float x) { return sqrtf(x); }
inline double __dsqrt_rn(double x) { return sqrt(x); }
inline float __saturatef(float x) { return x > 0.0f ? (x < 1.0f ? x : 1.0f) : 0.0f; }  // NaN -> 0
inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fmaf_rz(float a, float b, float c) { return fmaf(a, b, c); }
inline float __fmaf_ieee_rn(float a, float b, float c) { return fmaf(a, b, c); }
inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fadd_rz(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fmul_rz(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __drcp_rn(double x) { return 1.0 / x; }
inline float sinpif(float x) { return sinf((float)(M_PI * (double)x)); }
inline float cospif(float x) { return cosf((float)(M_PI * (double)x)); }
inline double sinpi(double x) { return sin(M_PI * x); }
inline double cospi(double x) { return cos(M_PI * x); }
inline void sincospif(float x, float* s, float* c) { *s = sinpif(x); *c = cospif(x); }
inline float normcdff(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }
inline double normcdf(double x) { return 0.5 * erfc(-x * 0.70710678118654752); }
inline double erfinv(double y) {
    if (!(y > -1.0 && y < 1.0)) return y == 1.0 ? INFINITY : (y == -1.0 ? -INFINITY : NAN);
    double w = -log((1.0 - y) * (1.0 + y)), x;  // Giles' approximation, then Newton steps on erf
    if (w < 5.0) {
        w -= 2.5;
        x = 2.81022636e-08;
        x = 3.43273939e-07 + x * w; x = -3.5233877e-06 + x * w; x = -4.39150654e-06 + x * w;
        x = 0.00021858087 + x * w; x = -0.00125372503 + x * w; x = -0.00417768164 + x * w;
        x = 0.246640727 + x * w; x = 1.50140941 + x * w;
    } else {
        w = sqrt(w) - 3.0;
        x = -0.000200214257;
        x = 0.000100950558 + x * w; x = 0.00134934322 + x * w; x = -0.00367342844 + x * w;
        x = 0.00573950773 + x * w; x = -0.0076224613 + x * w; x = 0.00943887047 + x * w;
        x = 1.00167406 + x * w; x = 2.83297682 + x * w;
    }
    x *= y;
    for (int i = 0; i < 2; ++i) x -= (erf(x) - y) / (1.1283791670955126 * exp(-x * x));
    return x;
}
inline float erfinvf(float y) { return (float)erfinv((double)y); }
inline double erfcinv(double y) { return erfinv(1.0 - y); }
inline float erfcinvf(float y) { return (float)erfinv(1.0 - (double)y); }
inline float normcdfinvf(float p) { return (float)(-1.4142135623730951 * erfcinv(2.0 * (double)p)); }
inline double normcdfinv(double p) { return -1.4142135623730951 * erfcinv(2.0 * p); }
inline int __isnanf(float x) { return std::isnan(x); }
inline int __isinff(float x) { return std::isinf(x); }
inline int __finitef(float x) { return std::isfinite(x); }
inline int __signbitf(float x) { return std::signbit(x); }

template <class I, class F>
inline I ks_f2i(F x, F r) {
    if (std::isnan(x)) return (I)0;
    if (r >= (F)std::numeric_limits<I>::max()) return std::numeric_limits<I>::max();
    if (r <= (F)std::numeric_limits<I>::min()) return std::numeric_limits<I>::min();
    return (I)r;
}
inline int __float2int_rn(float x) { return ks_f2i<int, double>(x, nearbyint((double)x)); }
inline int __float2int_rz(float x) { return ks_f2i<int, double>(x, trunc((double)x)); }
inline int __float2int_rd(float x) { return ks_f2i<int, double>(x, floor((double)x)); }
inline int __float2int_ru(float x) { return ks_f2i<int, double>(x, ceil((double)x)); }
inline unsigned __float2uint_rn(float x) { return ks_f2i<unsigned, double>(x, nearbyint((double)x)); }
inline unsigned __float2uint_rz(float x) { return ks_f2i<unsigned, double>(x, trunc((double)x)); }
inline unsigned __float2uint_rd(float x) { return ks_f2i<unsigned, double>(x, floor((double)x)); }
inline unsigned __float2uint_ru(float x) { return ks_f2i<unsigned, double>(x, ceil((double)x)); }
inline long long __float2ll_rn(float x) { return ks_f2i<long long, long double>(x, nearbyintl((long double)x)); }
inline long long __float2ll_rz(float x) { return ks_f2i<long long, long double>(x, truncl((long double)x)); }
inline unsigned long long __float2ull_rn(float x) {
    return ks_f2i<unsigned long long, long double>(x, nearbyintl((long double)x));
}
inline int __double2int_rn(double x) { return ks_f2i<int, double>(x, nearbyint(x)); }
inline int __double2int_rz(double x) { return ks_f2i<int, double>(x, trunc(x)); }
inline long long __double2ll_rn(double x) { return ks_f2i<long long, long double>(x, nearbyintl((long double)x)); }
inline float __double2float_rn(double x) { return (float)x; }
inline float __int2float_rn(int x) { return (float)x; }
inline float __uint2float_rn(unsigned x) { return (float)x; }
inline float __ll2float_rn(long long x) { return (float)x; }
inline float __ull2float_rn(unsigned long long x) { return (float)x; }
inline double __int2double_rn(int x) { return (double)x; }
inline double __ll2double_rn(long long x) { return (double)x; }

// ---------------------------------------------------------------------------------------------
// Cache-hinted loads and stores
// ---------------------------------------------------------------------------------------------
template <class T> inline T __ldg(const T* p) { return *p; }
template <class T> inline T __ldcg(const T* p) { return *p; }
template <class T> inline T __ldca(const T* p) { return *p; }
template <class T> inline T __ldcs(const T* p) { return *p; }
template <class T> inline T __ldlu(const T* p) { return *p; }
template <class T> inline T __ldcv(const T* p) { return *p; }
template <class T> inline void __stwb(T* p, T v) { *p = v; }
template <class T> inline void __stcg(T* p, T v) { *p = v; }
template <class T> inline void __stcs(T* p, T v) { *p = v; }
template <class T> inline void __stwt(T* p, T v) { *p = v; }

// ---------------------------------------------------------------------------------------------
// Half precision and bfloat16 (bit-exact storage, round-to-nearest-even conversions)
// ---------------------------------------------------------------------------------------------
namespace ks {
inline uint16_t f32_to_f16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t mant = x & 0x7fffffu;
    int exp = (int)((x >> 23) & 0xff);
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0u));
    int e = exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        mant |= 0x800000u;
        int shift = 14 - e;
        uint32_t hm = mant >> shift, rem = mant & ((1u << shift) - 1u), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (hm & 1u))) ++hm;
        return (uint16_t)(sign | hm);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (mant >> 13);
    uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
    return (uint16_t)h;
}
inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    if (exp == 0) {
        float v = (float)mant * 5.9604644775390625e-08f;  // 2^-24
        return sign ? -v : v;
    }
    uint32_t x = exp == 31 ? (sign | 0x7f800000u | (mant << 13)) : (sign | ((exp + 112u) << 23) | (mant << 13));
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
inline uint16_t f32_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}
inline float bf16_to_f32(uint16_t b) {
    uint32_t x = (uint32_t)b << 16;
    float f;
    std::memcpy(&f, &x, 4);
    return f;
}
}  // namespace ks

struct __half_raw { unsigned short x; };
struct __nv_bfloat16_raw { unsigned short x; };

#define KS_HALF_LIKE(H, TO16, TO32, RAW)                                                           \
    struct __attribute__((aligned(2))) H {                                                         \
        unsigned short __x;                                                                        \
        H() = default;                                                                             \
        H(float f) : __x(TO16(f)) {}                                                               \
        H(double f) : __x(TO16((float)f)) {}                                                       \
        H(int v) : __x(TO16((float)v)) {}                                                          \
        H(unsigned v) : __x(TO16((float)v)) {}                                                     \
        H(short v) : __x(TO16((float)v)) {}                                                        \
        H(unsigned short v) : __x(TO16((float)v)) {}                                               \
        H(long long v) : __x(TO16((float)v)) {}                                                    \
        H(unsigned long long v) : __x(TO16((float)v)) {}                                           \
        H(const RAW& r) : __x(r.x) {}                                                              \
        operator float() const { return TO32(__x); }                                               \
        operator RAW() const { return RAW{__x}; }                                                  \
        H& operator=(float f) { __x = TO16(f); return *this; }                                     \
        H& operator=(double f) { __x = TO16((float)f); return *this; }                             \
        H& operator=(const RAW& r) { __x = r.x; return *this; }                                    \
        H& operator+=(const H& o) { return *this = H((double)float(*this) + (double)float(o)); }   \
        H& operator-=(const H& o) { return *this = H((double)float(*this) - (double)float(o)); }   \
        H& operator*=(const H& o) { return *this = H((double)float(*this) * (double)float(o)); }   \
        H& operator/=(const H& o) { return *this = H((double)float(*this) / (double)float(o)); }   \
        H& operator++() { return *this += H(1.0f); }                                               \
        H& operator--() { return *this -= H(1.0f); }                                               \
    };                                                                                             \
    inline H operator+(const H& a, const H& b) { return H((double)float(a) + (double)float(b)); }  \
    inline H operator-(const H& a, const H& b) { return H((double)float(a) - (double)float(b)); }  \
    inline H operator*(const H& a, const H& b) { return H((double)float(a) * (double)float(b)); }  \
    inline H operator/(const H& a, const H& b) { return H((double)float(a) / (double)float(b)); }  \
    inline H operator-(const H& a) { H r; r.__x = (unsigned short)(a.__x ^ 0x8000u); return r; }  \
    inline H operator+(const H& a) { return a; }                                                   \
    inline bool operator==(const H& a, const H& b) { return float(a) == float(b); }                \
    inline bool operator!=(const H& a, const H& b) { return float(a) != float(b); }                \
    inline bool operator<(const H& a, const H& b) { return float(a) < float(b); }                  \
    inline bool operator<=(const H& a, const H& b) { return float(a) <= float(b); }                \
    inline bool operator>(const H& a, const H& b) { return float(a) > float(b); }                  \
    inline bool operator>=(const H& a, const H& b) { return float(a) >= float(b); }
KS_HALF_LIKE(__half, ::ks::f32_to_f16, ::ks::f16_to_f32, __half_raw)
KS_HALF_LIKE(__nv_bfloat16, ::ks::f32_to_bf16, ::ks::bf16_to_f32, __nv_bfloat16_raw)
#undef KS_HALF_LIKE
typedef __half half;
typedef __nv_bfloat16 nv_bfloat16;

struct __attribute__((aligned(4))) __half2 {
    __half x, y;
};
struct __attribute__((aligned(4))) __nv_bfloat162 {
    __nv_bfloat16 x, y;
};
typedef __half2 half2;
typedef __nv_bfloat162 nv_bfloat162;

#define CUDART_INF_FP16 __ushort_as_half((unsigned short)0x7c00u)
#define CUDART_MAX_NORMAL_FP16 __ushort_as_half((unsigned short)0x7bffu)
#define CUDART_INF_BF16 __ushort_as_bfloat16((unsigned short)0x7f80u)

#define KS_HALF_FUNCS(H, H2, P, F2H, H2F)                                                            \
    inline H P##add(H a, H b) { return a + b; }                                                       \
    inline H P##sub(H a, H b) { return a - b; }                                                       \
    inline H P##mul(H a, H b) { return a * b; }                                                       \
    inline H P##div(H a, H b) { return a / b; }                                                       \
    inline H P##fma(H a, H b, H c) { return H(fma((double)float(a), (double)float(b), (double)float(c))); } \
    inline H P##neg(H a) { return -a; }                                                               \
    inline H P##abs(H a) { H r; r.__x = (unsigned short)(a.__x & 0x7fffu); return r; }               \
    inline H P##max(H a, H b) { return H(fmaxf(float(a), float(b))); }                                \
    inline H P##min(H a, H b) { return H(fminf(float(a), float(b))); }                                \
    inline bool P##eq(H a, H b) { return a == b; }                                                    \
    inline bool P##ne(H a, H b) { return a != b; }                                                    \
    inline bool P##lt(H a, H b) { return a < b; }                                                     \
    inline bool P##le(H a, H b) { return a <= b; }                                                    \
    inline bool P##gt(H a, H b) { return a > b; }                                                     \
    inline bool P##ge(H a, H b) { return a >= b; }                                                    \
    inline H2 P##add2(H2 a, H2 b) { return H2{a.x + b.x, a.y + b.y}; }                                \
    inline H2 P##sub2(H2 a, H2 b) { return H2{a.x - b.x, a.y - b.y}; }                                \
    inline H2 P##mul2(H2 a, H2 b) { return H2{a.x * b.x, a.y * b.y}; }                                \
    inline H2 P##fma2(H2 a, H2 b, H2 c) { return H2{P##fma(a.x, b.x, c.x), P##fma(a.y, b.y, c.y)}; }  \
    inline H2 P##neg2(H2 a) { return H2{-a.x, -a.y}; }                                                \
    inline H2 P##abs2(H2 a) { return H2{P##abs(a.x), P##abs(a.y)}; }                                  \
    inline H2 P##max2(H2 a, H2 b) { return H2{P##max(a.x, b.x), P##max(a.y, b.y)}; }                  \
    inline H2 P##min2(H2 a, H2 b) { return H2{P##min(a.x, b.x), P##min(a.y, b.y)}; }                  \
    inline H2 operator+(const H2& a, const H2& b) { return P##add2(a, b); }                           \
    inline H2 operator-(const H2& a, const H2& b) { return P##sub2(a, b); }                           \
    inline H2 operator*(const H2& a, const H2& b) { return P##mul2(a, b); }                           \
    inline H2 operator/(const H2& a, const H2& b) { return H2{a.x / b.x, a.y / b.y}; }                \
    inline H2& operator+=(H2& a, const H2& b) { return a = a + b; }                                   \
    inline H2& operator-=(H2& a, const H2& b) { return a = a - b; }                                   \
    inline H2& operator*=(H2& a, const H2& b) { return a = a * b; }                                   \
    inline bool P##isnan(H a) { return std::isnan(float(a)); }                                        \
    inline int P##isinf(H a) { float f = float(a); return std::isinf(f) ? (f > 0 ? 1 : -1) : 0; }
KS_HALF_FUNCS(__half, __half2, __h, __float2half, __half2float)
KS_HALF_FUNCS(__nv_bfloat16, __nv_bfloat162, __h, __float2bfloat16, __bfloat162float)
#undef KS_HALF_FUNCS
inline __half2 __h2div(__half2 a, __half2 b) { return a / b; }
inline __nv_bfloat162 __h2div(__nv_bfloat162 a, __nv_bfloat162 b) { return a / b; }

inline __half __float2half(float f) { return __half(f); }
inline __half __float2half_rn(float f) { return __half(f); }
inline __half __double2half(double d) { return __half(d); }
inline float __half2float(__half h) { return float(h); }
inline __half __int2half_rn(int v) { return __half(v); }
inline int __half2int_rn(__half h) { return __float2int_rn(float(h)); }
inline int __half2int_rz(__half h) { return __float2int_rz(float(h)); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline short __half_as_short(__half h) { return (short)h.__x; }
inline __half __ushort_as_half(unsigned short v) { __half h; h.__x = v; return h; }
inline __half __short_as_half(short v) { __half h; h.__x = (unsigned short)v; return h; }
inline __half2 __float2half2_rn(float f) { return __half2{__half(f), __half(f)}; }
inline __half2 __floats2half2_rn(float a, float b) { return __half2{__half(a), __half(b)}; }
inline __half2 __float22half2_rn(float2 v) { return __half2{__half(v.x), __half(v.y)}; }
inline float2 __half22float2(__half2 v) { return make_float2(float(v.x), float(v.y)); }
inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
inline __half2 __half2half2(__half a) { return __half2{a, a}; }
inline __half2 make_half2(__half a, __half b) { return __half2{a, b}; }
inline __half __low2half(__half2 v) { return v.x; }
inline __half __high2half(__half2 v) { return v.y; }
inline float __low2float(__half2 v) { return float(v.x); }
inline float __high2float(__half2 v) { return float(v.y); }
inline __half2 __lows2half2(__half2 a, __half2 b) { return __half2{a.x, b.x}; }
inline __half2 __highs2half2(__half2 a, __half2 b) { return __half2{a.y, b.y}; }
inline __half hsqrt(__half a) { return __half(sqrtf(float(a))); }
inline __half hrsqrt(__half a) { return __half(1.0f / sqrtf(float(a))); }
inline __half hexp(__half a) { return __half(expf(float(a))); }
inline __half hlog(__half a) { return __half(logf(float(a))); }
inline __half hrcp(__half a) { return __half(1.0f / float(a)); }

inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
inline __nv_bfloat16 __double2bfloat16(double d) { return __nv_bfloat16(d); }
inline float __bfloat162float(__nv_bfloat16 h) { return float(h); }
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
inline short __bfloat16_as_short(__nv_bfloat16 h) { return (short)h.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short v) { __nv_bfloat16 h; h.__x = v; return h; }
inline __nv_bfloat16 __short_as_bfloat16(short v) { __nv_bfloat16 h; h.__x = (unsigned short)v; return h; }
inline __nv_bfloat162 __float2bfloat162_rn(float f) { return __nv_bfloat162{__nv_bfloat16(f), __nv_bfloat16(f)}; }
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return __nv_bfloat162{__nv_bfloat16(a), __nv_bfloat16(b)}; }
inline __nv_bfloat162 __float22bfloat162_rn(float2 v) { return __nv_bfloat162{__nv_bfloat16(v.x), __nv_bfloat16(v.y)}; }
inline float2 __bfloat1622float2(__nv_bfloat162 v) { return make_float2(float(v.x), float(v.y)); }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) { return __nv_bfloat162{a, b}; }
inline __nv_bfloat162 __bfloat162bfloat162(__nv_bfloat16 a) { return __nv_bfloat162{a, a}; }
inline __nv_bfloat16 __low2bfloat16(__nv_bfloat162 v) { return v.x; }
inline __nv_bfloat16 __high2bfloat16(__nv_bfloat162 v) { return v.y; }
inline float __low2float(__nv_bfloat162 v) { return float(v.x); }
inline float __high2float(__nv_bfloat162 v) { return float(v.y); }
inline __nv_bfloat16 hsqrt(__nv_bfloat16 a) { return __nv_bfloat16(sqrtf(float(a))); }
inline __nv_bfloat16 hexp(__nv_bfloat16 a) { return __nv_bfloat16(expf(float(a))); }
inline __half __float2half_rz(float f) {  // truncate toward zero
    __half h = __half(f);
    if (std::isfinite(f) && fabsf(float(h)) > fabsf(f)) h.__x = (unsigned short)(h.__x - 1);
    return h;
}
inline __half atomicAdd(__half* p, __half v) {
    return ks_atomic_cas_loop<__half, uint16_t>(p, [v](__half c) { return c + v; });
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* p, __nv_bfloat16 v) {
    return ks_atomic_cas_loop<__nv_bfloat16, uint16_t>(p, [v](__nv_bfloat16 c) { return c + v; });
}
inline __half2 atomicAdd(__half2* p, __half2 v) {
    return ks_atomic_cas_loop<__half2, uint32_t>(p, [v](__half2 c) { return c + v; });
}
inline __nv_bfloat162 atomicAdd(__nv_bfloat162* p, __nv_bfloat162 v) {
    return ks_atomic_cas_loop<__nv_bfloat162, uint32_t>(p, [v](__nv_bfloat162 c) { return c + v; });
}

// ---------------------------------------------------------------------------------------------
// Host API (implemented in the runtime; synchronous; one device)
// ---------------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** ptr, size_t size);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind);
cudaError_t cudaMemset(void* ptr, int value, size_t count);
cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind);
cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaDeviceReset();
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = 0);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
namespace ks {
cudaError_t func_set_attribute(cudaFuncAttribute attr, int value);
bool is_device_pointer(const void* p);
}

inline cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, cudaMemcpyKind kind,
                                   cudaStream_t = 0) {
    return cudaMemcpy(dst, src, count, kind);
}
inline cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t = 0) {
    return cudaMemset(ptr, value, count);
}
inline cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t) { return cudaMalloc(ptr, size); }
inline cudaError_t cudaFreeAsync(void* ptr, cudaStream_t) { return cudaFree(ptr); }
template <class T>
inline cudaError_t cudaMalloc(T** ptr, size_t size) {
    return cudaMalloc(reinterpret_cast<void**>(ptr), size);
}
template <class T>
inline cudaError_t cudaMallocAsync(T** ptr, size_t size, cudaStream_t s) {
    return cudaMallocAsync(reinterpret_cast<void**>(ptr), size, s);
}
template <class T>
inline cudaError_t cudaMemcpyToSymbol(T& symbol, const void* src, size_t count, size_t offset = 0,
                                      cudaMemcpyKind = cudaMemcpyHostToDevice) {
    if (offset + count > sizeof(T)) return cudaErrorInvalidValue;
    std::memcpy(reinterpret_cast<char*>(const_cast<std::remove_cv_t<T>*>(&symbol)) + offset, src, count);
    return cudaSuccess;
}
template <class T>
inline cudaError_t cudaMemcpyToSymbolAsync(T& symbol, const void* src, size_t count, size_t offset = 0,
                                           cudaMemcpyKind kind = cudaMemcpyHostToDevice, cudaStream_t = 0) {
    return cudaMemcpyToSymbol(symbol, src, count, offset, kind);
}
template <class T>
inline cudaError_t cudaMemcpyFromSymbol(void* dst, const T& symbol, size_t count, size_t offset = 0,
                                        cudaMemcpyKind = cudaMemcpyDeviceToHost) {
    if (offset + count > sizeof(T)) return cudaErrorInvalidValue;
    std::memcpy(dst, reinterpret_cast<const char*>(&symbol) + offset, count);
    return cudaSuccess;
}
template <class T>
inline cudaError_t cudaGetSymbolAddress(void** ptr, const T& symbol) {
    *ptr = (void*)&symbol;
    return cudaSuccess;
}
template <class T>
inline cudaError_t cudaGetSymbolSize(size_t* size, const T&) {
    *size = sizeof(T);
    return cudaSuccess;
}
template <class F>
inline cudaError_t cudaFuncSetAttribute(F*, cudaFuncAttribute attr, int value) {
    return ::ks::func_set_attribute(attr, value);
}
inline cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute attr, int value) {
    return ::ks::func_set_attribute(attr, value);
}
template <class F>
inline cudaError_t cudaFuncSetCacheConfig(F*, cudaFuncCache) { return cudaSuccess; }
inline cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache) { return cudaSuccess; }
inline cudaError_t cudaDeviceSetSharedMemConfig(cudaSharedMemConfig) { return cudaSuccess; }
template <class F>
inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F*) {
    std::memset(a, 0, sizeof(*a));
    a->maxThreadsPerBlock = 1024;
    a->numRegs = 32;
    a->ptxVersion = a->binaryVersion = 90;
    a->maxDynamicSharedSizeBytes = 48 * 1024;
    return cudaSuccess;
}
template <class F>
inline cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F*, int block_size, size_t smem) {
    if (block_size <= 0) return cudaErrorInvalidValue;
    int by_threads = 2048 / block_size, by_smem = smem ? (int)((228u * 1024u) / smem) : 32;
    int r = by_threads < by_smem ? by_threads : by_smem;
    *n = r < 32 ? r : 32;
    return cudaSuccess;
}
template <class F>
inline cudaError_t cudaOccupancyMaxPotentialBlockSize(int* min_grid, int* block, F*, size_t = 0, int limit = 0) {
    *block = (limit > 0 && limit < 1024) ? limit : 1024;
    *min_grid = 132 * (2048 / *block);
    return cudaSuccess;
}
inline cudaError_t cudaProfilerStart() { return cudaSuccess; }
inline cudaError_t cudaProfilerStop() { return cudaSuccess; }
inline bool __isGlobal(const void* p) { return ::ks::is_device_pointer(p); }

#endif  // KS_CPU_H
