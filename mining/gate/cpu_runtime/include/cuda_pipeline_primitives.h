// cuda_pipeline_primitives.h for kernel-skills' CPU executor: the `__pipeline_*` primitives.
//
// Each CUDA thread keeps its own queue of copies. `__pipeline_memcpy_async` records a copy (it
// moves no byte yet), `__pipeline_commit` closes the thread's open batch, and
// `__pipeline_wait_prior(N)` performs every committed batch but the newest N, oldest first.
// Deferring each copy to the wait that publishes it is the latest timing the hardware allows, so
// a kernel that reads its shared destination before waiting (or rewrites its source before the
// copy is waited for) reads stale bytes here and fails the gate instead of passing by luck. The
// copies are done with plain 4/8-byte loads and stores in this (instrumented) header, so the
// race checker sees the shared writes at the wait, in the waiting thread.
#pragma once
#include "../ks_cpu.h"

namespace ks {
namespace pipeline {

struct Copy {
    void* dst;
    const void* src;
    size_t size;
    size_t zfill;
};

struct Queue {  // all zero when empty
    Copy copies[64];
    int n;              // recorded copies
    int batch_end[64];  // copies[0, batch_end[i]) belong to committed batches 0..i
    int batches;
};

// One table per OS thread (a block's fibers share it), reset at every block start. The
// bookkeeping is host memory and not instrumented (KS_NOSAN); only `perform`'s copies are.
struct Table {
    uint64_t serial;
    Queue* q;
    size_t size;
};

KS_NOSAN __attribute__((noinline)) inline Queue& queue() {
    static thread_local Table t{~0ull, nullptr, 0};
    size_t n = (size_t)blockDim.x * blockDim.y * blockDim.z;
    if (t.serial != t_block_serial || t.size != n) {
        std::free(t.q);
        t.q = static_cast<Queue*>(std::calloc(n, sizeof(Queue)));
        if (t.q == nullptr) ::ks::fail("unsupported", "cannot allocate the asynchronous-copy queues");
        t.size = n;
        t.serial = t_block_serial;
    }
    size_t id = ((size_t)threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
    return t.q[id];
}

typedef uint32_t __attribute__((may_alias)) u32a;
typedef uint64_t __attribute__((may_alias)) u64a;

inline void perform(const Copy& c) {
    size_t copied = c.size - c.zfill;
    char* d = static_cast<char*>(c.dst);
    const char* s = static_cast<const char*>(c.src);
    for (size_t i = 0; i < c.size; i += 4) {
        if (c.size % 8 == 0 && i % 8 == 0 && i + 8 <= copied) {
            *reinterpret_cast<u64a*>(d + i) = *reinterpret_cast<const u64a*>(s + i);
            i += 4;
        } else {
            *reinterpret_cast<u32a*>(d + i) = i < copied ? *reinterpret_cast<const u32a*>(s + i) : 0u;
        }
    }
}

// The first `done` copies, the ones committed before the newest `keep` batches.
KS_NOSAN __attribute__((noinline)) inline int due(size_t keep, Copy* out) {
    Queue& q = queue();
    if ((size_t)q.batches <= keep) return 0;
    int done = q.batch_end[q.batches - 1 - keep];
    for (int i = 0; i < done; ++i) out[i] = q.copies[i];
    int left = q.n - done;
    for (int i = 0; i < left; ++i) q.copies[i] = q.copies[done + i];
    int nb = 0;
    for (int i = q.batches - (int)keep; i < q.batches; ++i) q.batch_end[nb++] = q.batch_end[i] - done;
    q.n = left;
    q.batches = nb;
    return done;
}

inline void wait_prior(size_t keep) {
    Copy copies[64];
    int done = due(keep, copies);
    for (int i = 0; i < done; ++i) perform(copies[i]);
}

KS_NOSAN __attribute__((noinline)) inline void record(void* dst, const void* src, size_t size, size_t zfill) {
    Queue& q = queue();
    if (q.n == 64) ::ks::fail("unsupported", "more than 64 asynchronous copies in flight in one thread");
    q.copies[q.n++] = {dst, src, size, zfill};
}

KS_NOSAN __attribute__((noinline)) inline void commit() {
    Queue& q = queue();
    if (q.batches == 64) ::ks::fail("unsupported", "more than 64 committed copy batches in flight in one thread");
    q.batch_end[q.batches++] = q.n;
}

}  // namespace pipeline
}  // namespace ks

inline void __pipeline_memcpy_async(void* __restrict__ dst_shared, const void* __restrict__ src_global,
                                    size_t size_and_align, size_t zfill = 0) {
    if (!(size_and_align == 4 || size_and_align == 8 || size_and_align == 16) || zfill > size_and_align ||
        ((uintptr_t)dst_shared | (uintptr_t)src_global) % size_and_align != 0)
        ::ks::fail("oob", "__pipeline_memcpy_async(%p, %p, %zu, %zu): the size must be 4, 8 or 16 "
                   "and both pointers aligned to it (misaligned address on the GPU)", dst_shared, src_global, size_and_align, zfill);
    ::ks::pipeline::record(dst_shared, src_global, size_and_align, zfill);
}

inline void __pipeline_commit() { ::ks::pipeline::commit(); }

inline void __pipeline_wait_prior(size_t prior) { ::ks::pipeline::wait_prior(prior); }
