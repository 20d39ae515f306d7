// ks_cpu_runtime.cpp: the non-template part of kernel-skills' CPU executor.
//
// Compiled once per toolchain and mode (without sanitizer instrumentation) by
// mining/gate/cpu_toolchain.py and linked into every CPU harness binary.
//
//  - scheduler: every CUDA thread is a boost.context fiber; a block runs on one OS thread;
//    blocks are handed to worker threads from an atomic counter (forward or reverse order);
//  - __syncthreads: generation barrier, strict (divergent sites, exited threads -> error);
//  - warp collectives: per-warp exchange completed by the last expected lane;
//  - memory checking (mode "check"): the kernel TU is compiled with -fsanitize=thread but linked
//    without libtsan; the __tsan_* callbacks below check every instrumented access against the
//    device heap (red zones, freed buffers), the block's shared arena (red zones between
//    variables) and per-word shadow state (races within a barrier interval, between blocks).
//
// Errors: one line "KS_ERROR <kind> <message>" on stderr, then _exit(86).
#include "ks_cpu.h"

#include <boost/context/detail/fcontext.hpp>

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#ifdef KS_MODE_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

namespace bctx = boost::context::detail;

// ---------------------------------------------------------------------------------------------
// Built-in variables
// ---------------------------------------------------------------------------------------------
__thread uint3 threadIdx;
__thread uint3 blockIdx;
dim3 blockDim;
dim3 gridDim;

extern "C" char __executable_start[];
extern "C" char _end[];

namespace ks {

__thread uint64_t t_block_serial;

namespace {

constexpr size_t kPage = 4096;
constexpr size_t kSmemLimit = 227 * 1024;       // per block, static + dynamic (sm_90 opt-in maximum)
constexpr size_t kSmemDefault = 48 * 1024;      // dynamic smem above this needs cudaFuncSetAttribute
constexpr size_t kArenaCap = 1u << 20;          // virtual size of a worker's shared arena
constexpr size_t kDynOff = 256;                 // red zone before the dynamic region
constexpr size_t kRedZone = 256;                // red zone after every shared variable
constexpr uintptr_t kHeapSpan = 1ull << 40;     // reserved device heap (address space only)
constexpr size_t kHeapGap = 1u << 20;           // unmapped gap before every device buffer
constexpr size_t kBufFrontRz = 256;             // poisoned bytes before a buffer (mapped)
constexpr size_t kBufBackRz = 256;              // at least this many poisoned bytes after
constexpr uint16_t kNone = 0xffff;
constexpr uint16_t kMulti = 0xfffe;  // several threads (atomic accessors)
constexpr uint8_t kMixed = 0xff;
constexpr unsigned kSpinYield = 256;            // atomic/volatile ops between forced yields
constexpr size_t kStripes = 1024;               // locks for device shadow cells, one per 4 KB page mod 1024

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

// ---------------------------------------------------------------------------------------------
// State
// ---------------------------------------------------------------------------------------------
enum FState : uint8_t { F_RUN, F_BAR, F_WARP, F_AMASK, F_DONE };

struct Fiber {
    bctx::fcontext_t ctx;
    char* stack_lo;
    size_t stack_size;
    uint3 tid;
    uint16_t linear;
    uint8_t warp, lane;
    const char* wfile;
    int wline;
    int bar_op, pred, bar_result;
    int op;
    unsigned mask;
    int width, arg;
    unsigned vsize;
    uint64_t val, result;
    unsigned spin;
    void* asan_fake;
};

struct Warp {
    unsigned exist, exited;
    unsigned arrived;  // lanes waiting in a warp collective
    uint32_t ws;  // completed collectives (orders same-warp accesses for the race checker)
};

struct SVar {
    size_t off, size;
    const char* file;
    int line;
    const char* name;
};

// Shadow of one 4-byte word (or one byte after a sub-word access) of the shared arena, split in
// a hot part (read by every checked access) and a cold part (conflict details for messages).
struct SCell {
    uint32_t epoch;   // barrier interval of the state below
    uint32_t valid;   // block serial for which this word belongs to a variable
    uint16_t w_tid, r_tid;
    uint16_t r_ws;
    uint8_t r_warp, flags;
};
struct SCold {
    uint32_t w_pc, r_pc, a_pc;
    uint16_t a_tid, w_ws, a_ws;
    uint8_t a_warp, pad;
    uint32_t o_pc;     // the reader before the last distinct one (named in race reports)
    uint16_t o_tid, o_ws;
};
static_assert(sizeof(SCell) == 16 && sizeof(SCold) == 28, "shadow cell layout");
enum : uint8_t { S_SUB = 1, S_RMULTI = 2, S_ATOM = 4 };

// Shadow of one 4-byte word (or byte) of a device buffer. Within a block it tracks the last
// writer and the last two distinct readers of the barrier interval with the warp-collective count
// (`ws`) at their access, so lanes of one warp are ordered only by a collective between them,
// exactly as in shared memory; the pcs name both sites in a race report.
struct GCell {
    uint32_t launch;
    uint32_t block;   // first block that touched the word in this launch
    uint32_t pc;      // last access (cross-block reports)
    uint32_t w_pc, r_pc, o_pc;
    uint16_t epoch;
    uint16_t w_tid, r_tid, o_tid;
    uint16_t w_ws, r_ws, o_ws;
    uint8_t flags, r_warp;
};
enum : uint8_t { G_W = 1, G_R = 2, G_A = 4, G_MB = 8, G_SUB = 16, G_RMULTI = 32 };

struct Alloc {
    uintptr_t base;
    size_t size;
    uintptr_t map_lo;
    size_t map_len;
    int id;
    bool freed;
    GCell* cells;
    GCell* bytes;
    size_t ncells;
};

struct Worker {
    int id = 0;
    bctx::fcontext_t sched_ctx = nullptr;
    Fiber* cur = nullptr;
    std::vector<Fiber> fibers;
    std::vector<uint8_t> st;  // FState of every fiber (compact: the scheduler scans it)
    char* stacks = nullptr;
    size_t stack_stride = 0, stack_size = 0, nstacks = 0;
    char* arena = nullptr;
    SCell* scell = nullptr;   // one per 4-byte word of the arena
    SCold* scold = nullptr;
    SCell* sbyte = nullptr;   // four per word, used after sub-word accesses
    SCold* sbcold = nullptr;
    uint32_t epoch = 0;
    uint32_t blk_serial = 0;
    uint64_t serial_counter = 0;
    uint64_t block_linear = 0;
    uint3 bidx{0, 0, 0};
    unsigned nthreads = 0, n_live = 0, n_exited = 0, n_bar = 0, n_amask = 0;
    Warp warps[32];
    size_t bump = 0, static_bytes = 0;
    std::vector<SVar> vars;
    uintptr_t tls_lo = 0, tls_hi = 0;
    Alloc* alloc_cache[4] = {nullptr, nullptr, nullptr, nullptr};  // recently used device buffers
    unsigned alloc_next = 0;
    const void* sched_bottom = nullptr;
    size_t sched_size = 0;
    void* sched_fake = nullptr;
    char* altstack = nullptr;
};

struct LaunchState {
    LaunchInfo info;
    uint64_t nblocks = 0;
    std::atomic<uint64_t> next{0};
    bool reverse = false;
    bool check = true;
    uint32_t id = 0;
    unsigned nthreads = 0;
    std::atomic<bool> fence{false};
    uintptr_t ctx_lo = 0, ctx_hi = 0;
};

__thread Worker* t_worker = nullptr;  // this OS thread's worker
__thread Worker* t_chk = nullptr;     // set while a fiber runs with checks on

// Process-lifetime objects are heap-allocated and never destroyed: pool threads may still be
// blocked on them while exit() runs static destructors.
LaunchState& g_L = *new LaunchState();
std::vector<Worker*>& g_workers = *new std::vector<Worker*>();
std::mutex& g_pool_mu = *new std::mutex();
std::condition_variable& g_pool_cv = *new std::condition_variable();
std::condition_variable& g_done_cv = *new std::condition_variable();
uint64_t g_pool_gen = 0;
unsigned g_pool_active = 0;
bool g_multi = false;
struct alignas(64) Stripe {
    std::atomic<uint8_t> v{0};
};
Stripe g_stripes[kStripes];

uintptr_t g_heap_lo = 0;
uintptr_t g_heap_span = 0;
[[maybe_unused]] uintptr_t g_heap_bump = 0;
std::vector<Alloc*>& g_allocs = *new std::vector<Alloc*>();  // sorted by base
std::mutex& g_alloc_mu = *new std::mutex();
int g_alloc_ids = 0;
size_t g_max_dyn_attr = kSmemDefault;
uint32_t g_launch_counter = 0;
size_t g_stack_kb = 0;

std::vector<void (*)(void*)>& dyn_setters() {
    static std::vector<void (*)(void*)>& v = *new std::vector<void (*)(void*)>();
    return v;
}

// ---------------------------------------------------------------------------------------------
// Error reporting
// ---------------------------------------------------------------------------------------------
std::atomic<int> g_failing{0};

void claim_failure() {
    if (g_failing.exchange(1) != 0) {
        for (;;) pause();  // another thread is reporting; it will _exit the process
    }
}

[[noreturn]] void emit(const char* kind, const std::string& msg) {
    std::string line = std::string("KS_ERROR ") + kind + " " + msg + "\n";
    for (char& c : line)
        if (c == '\n' && &c != &line.back()) c = ' ';
    ssize_t off = 0;
    while (off < (ssize_t)line.size()) {
        ssize_t n = ::write(2, line.data() + off, line.size() - off);
        if (n <= 0) break;
        off += n;
    }
    _exit(86);
}

std::string vfmt(const char* fmt, va_list ap) {
    char buf[4096];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    return buf;
}

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
    va_list ap;
    va_start(ap, f);
    std::string s = vfmt(f, ap);
    va_end(ap);
    return s;
}

const char* base_name(const char* path) {
    if (!path) return "?";
    const char* s = strrchr(path, '/');
    return s ? s + 1 : path;
}

std::string exe_path() {
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n <= 0) return "";
    buf[n] = 0;
    return buf;
}

// file:line of a code address: the innermost inlined frame that is not the runtime header or a
// system header (so an access inside __ldg or std::min is reported at the kernel's line).
std::string where(uintptr_t pc) {
    if (!pc) return "?";
    std::string exe = exe_path();
    std::string cmd = fmt("addr2line -i -e '%s' 0x%lx 2>/dev/null", exe.c_str(), (unsigned long)(pc - 1));
    FILE* p = popen(cmd.c_str(), "r");
    std::vector<std::string> frames;
    if (p) {
        char line[4096];
        while (fgets(line, sizeof(line), p)) {
            std::string s(line);
            while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
            size_t d = s.find(" (discriminator");
            if (d != std::string::npos) s.resize(d);
            frames.push_back(s);
        }
        pclose(p);
    }
    for (const std::string& f : frames) {
        if (f.rfind("??", 0) == 0) continue;
        if (f.find("ks_cpu.h:") != std::string::npos || f.rfind("/usr/", 0) == 0) continue;
        return base_name(f.c_str());
    }
    for (const std::string& f : frames)
        if (f.rfind("??", 0) != 0) return base_name(f.c_str());
    return fmt("pc 0x%lx", (unsigned long)pc);
}

std::string coords(uint3 v) { return fmt("(%u,%u,%u)", v.x, v.y, v.z); }

std::string who(Worker* W, Fiber* f) {
    return fmt("thread %s block %s of kernel %s", coords(f->tid).c_str(), coords(W->bidx).c_str(),
               g_L.info.kernel ? g_L.info.kernel : "?");
}

uint3 tid_coords(unsigned linear) {
    const dim3& b = g_L.info.block;
    return uint3{linear % b.x, (linear / b.x) % b.y, linear / (b.x * b.y)};
}

uint3 block_coords(uint64_t linear) {
    const dim3& g = g_L.info.grid;
    return uint3{(unsigned)(linear % g.x), (unsigned)((linear / g.x) % g.y), (unsigned)(linear / ((uint64_t)g.x * g.y))};
}

const char* kind_verb(int kind);

}  // namespace

void fail(const char* kind, const char* f, ...) {
    claim_failure();
    va_list ap;
    va_start(ap, f);
    std::string msg = vfmt(f, ap);
    va_end(ap);
    emit(kind, msg);
}

namespace {

[[noreturn]] void fail_here(const char* kind, const char* file, int line, const std::string& msg) {
    claim_failure();
    emit(kind, fmt("%s:%d: %s", base_name(file), line, msg.c_str()));
}

// ---------------------------------------------------------------------------------------------
// Fibers and scheduling
// ---------------------------------------------------------------------------------------------
Worker* current_worker_or_die(const char* what) {
    Worker* W = t_worker;
    if (!W || !W->cur) fail("unsupported", "%s called outside a kernel (host code)", what);
    return W;
}

inline void asan_start(void** fake, const void* bottom, size_t size) {
#ifdef KS_MODE_ASAN
    __sanitizer_start_switch_fiber(fake, bottom, size);
#else
    (void)fake; (void)bottom; (void)size;
#endif
}
inline void asan_finish(void* fake, const void** bottom, size_t* size) {
#ifdef KS_MODE_ASAN
    __sanitizer_finish_switch_fiber(fake, bottom, size);
#else
    (void)fake; (void)bottom; (void)size;
#endif
}

// Fiber side: give control back to the block scheduler.
void yield_to_scheduler(Worker* W, Fiber* f) {
    t_chk = nullptr;
    asan_start(&f->asan_fake, W->sched_bottom, W->sched_size);
    bctx::transfer_t t = bctx::jump_fcontext(W->sched_ctx, nullptr);
    W->sched_ctx = t.fctx;
    asan_finish(f->asan_fake, &W->sched_bottom, &W->sched_size);
}

void check_exit_against_collectives(Worker* W, Fiber* f);
void try_release_amask(Worker* W, unsigned warp);

[[noreturn]] void fiber_exit(Worker* W, Fiber* f) {
    W->st[f->linear] = F_DONE;
    W->n_live--;
    W->n_exited++;
    W->warps[f->warp].exited |= 1u << f->lane;
    if (W->warps[f->warp].arrived) check_exit_against_collectives(W, f);
    if (W->n_amask) try_release_amask(W, f->warp);
    t_chk = nullptr;
    asan_start(nullptr, W->sched_bottom, W->sched_size);
    bctx::jump_fcontext(W->sched_ctx, nullptr);
    __builtin_unreachable();
}

void fiber_main(bctx::transfer_t t) {
    Worker* W = t_worker;
    W->sched_ctx = t.fctx;
    Fiber* f = static_cast<Fiber*>(t.data);
    asan_finish(nullptr, &W->sched_bottom, &W->sched_size);
    g_L.info.invoke(g_L.info.ctx);
    fiber_exit(W, f);
}

// Scheduler side: run fiber f until it blocks, yields or exits.
inline void resume(Worker* W, Fiber* f) {
    W->cur = f;
    threadIdx = f->tid;
    t_chk = g_L.check ? W : nullptr;
    asan_start(&W->sched_fake, f->stack_lo, f->stack_size);
    bctx::transfer_t t = bctx::jump_fcontext(f->ctx, f);
    asan_finish(W->sched_fake, nullptr, nullptr);
    f->ctx = t.fctx;
    t_chk = nullptr;
    W->cur = nullptr;
}

void ensure_stacks(Worker* W, unsigned n) {
    if (W->nstacks >= n) return;
    if (W->stacks) munmap(W->stacks, W->stack_stride * W->nstacks);
    size_t usable = round_up(g_stack_kb * 1024, kPage);
    W->stack_size = usable;
    W->stack_stride = usable + kPage;  // one guard page below every stack
    size_t total = W->stack_stride * n;
    void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("unsupported", "cannot map %zu bytes of fiber stacks", total);
    W->stacks = static_cast<char*>(p);
    for (unsigned i = 0; i < n; ++i) mprotect(W->stacks + i * W->stack_stride, kPage, PROT_NONE);
    W->nstacks = n;
    W->fibers.assign(n, Fiber{});
    W->st.assign(n, F_DONE);
}

// ---------------------------------------------------------------------------------------------
// Stack overflow detection (guard pages)
// ---------------------------------------------------------------------------------------------
struct sigaction g_old_segv, g_old_bus;

void segv_handler(int sig, siginfo_t* si, void* uc) {
    Worker* W = t_worker;
    uintptr_t a = (uintptr_t)si->si_addr;
    if (W && W->stacks && a >= (uintptr_t)W->stacks && a < (uintptr_t)W->stacks + W->stack_stride * W->nstacks &&
        (a - (uintptr_t)W->stacks) % W->stack_stride < kPage) {
        unsigned idx = (unsigned)((a - (uintptr_t)W->stacks) / W->stack_stride);
        uint3 t = idx < W->fibers.size() ? W->fibers[idx].tid : uint3{0, 0, 0};
        if (g_failing.exchange(1) != 0)
            for (;;) pause();
        // The process is about to exit: symbolizing here (not async-signal-safe) is acceptable, the
        // fault comes from a stack probe in kernel code, never from inside the allocator.
        uintptr_t pc = (uintptr_t)static_cast<ucontext_t*>(uc)->uc_mcontext.gregs[REG_RIP] + 1;
        std::string loc = where(pc);
        char buf[768];
        int n = snprintf(buf, sizeof(buf),
                         "KS_ERROR stack_overflow %s: thread (%u,%u,%u) block (%u,%u,%u) of kernel %s overflowed its "
                         "%zu KB fiber stack (deep recursion or large local arrays; raise KS_STACK_KB)\n",
                         loc.c_str(), t.x, t.y, t.z, W->bidx.x, W->bidx.y, W->bidx.z,
                         g_L.info.kernel ? g_L.info.kernel : "?", W->stack_size / 1024);
        ssize_t r = ::write(2, buf, (size_t)n);
        (void)r;
        _exit(86);
    }
    struct sigaction* old = sig == SIGSEGV ? &g_old_segv : &g_old_bus;
    if ((old->sa_flags & SA_SIGINFO) && old->sa_sigaction) {
        old->sa_sigaction(sig, si, uc);
        return;
    }
    if (old->sa_handler != SIG_IGN && old->sa_handler != SIG_DFL && old->sa_handler) {
        old->sa_handler(sig);
        return;
    }
    signal(sig, SIG_DFL);  // return and fault again with the default action: the sandbox reports it
}

void install_signal_handlers() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = segv_handler;
        sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGSEGV, &sa, &g_old_segv);
        sigaction(SIGBUS, &sa, &g_old_bus);
    });
}

// ---------------------------------------------------------------------------------------------
// Worker setup
// ---------------------------------------------------------------------------------------------
size_t exe_tls_size() {
    static size_t size = [] {
        size_t s = 0;
        dl_iterate_phdr(
            [](dl_phdr_info* info, size_t, void* data) -> int {
                for (int i = 0; i < info->dlpi_phnum; ++i)
                    if (info->dlpi_phdr[i].p_type == PT_TLS) {
                        size_t al = info->dlpi_phdr[i].p_align ? info->dlpi_phdr[i].p_align : 1;
                        *static_cast<size_t*>(data) = round_up(info->dlpi_phdr[i].p_memsz, al);
                    }
                return 1;  // the first module is the executable
            },
            &s);
        return s;
    }();
    return size;
}

void* map_or_die(size_t bytes, int prot) {
    void* p = mmap(nullptr, bytes, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("unsupported", "cannot map %zu bytes", bytes);
    return p;
}

void init_worker_thread(Worker* W) {
    t_worker = W;
    W->arena = static_cast<char*>(map_or_die(kArenaCap, PROT_READ | PROT_WRITE));
    memset(W->arena, 0xff, kArenaCap / 16);
    W->scell = static_cast<SCell*>(map_or_die(kArenaCap / 4 * sizeof(SCell), PROT_READ | PROT_WRITE));
    W->scold = static_cast<SCold*>(map_or_die(kArenaCap / 4 * sizeof(SCold), PROT_READ | PROT_WRITE));
    W->sbyte = static_cast<SCell*>(map_or_die(kArenaCap * sizeof(SCell), PROT_READ | PROT_WRITE));
    W->sbcold = static_cast<SCold*>(map_or_die(kArenaCap * sizeof(SCold), PROT_READ | PROT_WRITE));
#ifdef KS_MODE_ASAN
    __asan_poison_memory_region(W->arena, kArenaCap);
#endif
    uintptr_t tp = (uintptr_t)__builtin_thread_pointer();
    W->tls_lo = tp - exe_tls_size() - 64;
    W->tls_hi = tp + 64;
    size_t alt = 64 * 1024;
    W->altstack = static_cast<char*>(map_or_die(alt, PROT_READ | PROT_WRITE));
    stack_t ss;
    ss.ss_sp = W->altstack;
    ss.ss_size = alt;
    ss.ss_flags = 0;
    sigaltstack(&ss, nullptr);
    for (auto fn : dyn_setters()) fn(W->arena + kDynOff);
}

// ---------------------------------------------------------------------------------------------
// Blocks
// ---------------------------------------------------------------------------------------------
void mark_valid(Worker* W, size_t off, size_t size) {
    size_t w0 = off / 4, w1 = (off + size + 3) / 4;
    for (size_t w = w0; w < w1; ++w) W->scell[w].valid = W->blk_serial;
}

void poison_range(Worker* W, size_t off, size_t size) {
#ifdef KS_MODE_ASAN
    __asan_unpoison_memory_region(W->arena + off, size);
#endif
    memset(W->arena + off, 0xff, size);
}

void release_barrier(Worker* W);
[[noreturn]] void report_deadlock(Worker* W);
void resolve_amask_all(Worker* W);

void run_block(Worker* W, uint64_t linear) {
    W->block_linear = linear;
    W->bidx = block_coords(linear);
    blockIdx = W->bidx;
    t_block_serial = ++W->serial_counter;
    W->blk_serial = (uint32_t)t_block_serial;
    W->epoch++;
#ifdef KS_MODE_ASAN
    __asan_poison_memory_region(W->arena, W->bump ? W->bump : kArenaCap / 16);
#endif
    size_t smem = g_L.info.smem;
    W->vars.clear();
    W->static_bytes = 0;
    if (smem) {
        poison_range(W, kDynOff, smem);
        mark_valid(W, kDynOff, smem);
        W->vars.push_back(SVar{kDynOff, smem, nullptr, 0, "extern __shared__ (dynamic)"});
    }
    W->bump = round_up(kDynOff + smem + kRedZone, 128);

    unsigned n = g_L.nthreads;
    W->nthreads = n;
    W->n_live = n;
    W->n_exited = W->n_bar = W->n_amask = 0;
    for (unsigned w = 0; w < 32; ++w) {
        unsigned first = w * 32;
        unsigned cnt = first >= n ? 0 : (n - first >= 32 ? 32 : n - first);
        W->warps[w].exist = cnt == 32 ? 0xffffffffu : ((1u << cnt) - 1u);
        W->warps[w].exited = 0;
        W->warps[w].arrived = 0;
        W->warps[w].ws = 0;
    }
    for (unsigned i = 0; i < n; ++i) {
        Fiber& f = W->fibers[i];
        f.stack_lo = W->stacks + i * W->stack_stride + kPage;
        f.stack_size = W->stack_size;
        // Stagger the stack tops ("cache colouring"): equally spaced stacks would all map to the same
        // L1 sets and thrash on every fiber switch.
        size_t colour = (i * 64) % 4096;
        f.ctx = bctx::make_fcontext(f.stack_lo + f.stack_size - colour, f.stack_size - colour, fiber_main);
        f.tid = tid_coords(i);
        f.linear = (uint16_t)i;
        f.warp = (uint8_t)(i / 32);
        f.lane = (uint8_t)(i % 32);
        W->st[f.linear] = F_RUN;
        f.spin = 0;
        f.asan_fake = nullptr;
    }
    Fiber* F = W->fibers.data();
    for (;;) {
        unsigned ran = 0;
        if (!g_L.reverse) {
            for (unsigned i = 0; i < n; ++i)
                if (W->st[F[i].linear] == F_RUN) { resume(W, &F[i]); ++ran; }
        } else {
            for (unsigned i = n; i-- > 0;)
                if (W->st[F[i].linear] == F_RUN) { resume(W, &F[i]); ++ran; }
        }
        if (W->n_live == 0) break;
        if (W->n_bar == W->n_live) {
            release_barrier(W);
            continue;
        }
        if (ran == 0) {
            if (W->n_amask) {
                resolve_amask_all(W);
                continue;
            }
            report_deadlock(W);
        }
    }
    threadIdx = uint3{0, 0, 0};
}

bool same_site(const Fiber& a, const Fiber& b) {
    return a.wline == b.wline && (a.wfile == b.wfile || strcmp(a.wfile, b.wfile) == 0);
}

// All live threads wait at a barrier: check it is one barrier and nobody has exited, then open it.
void release_barrier(Worker* W) {
    Fiber* F = W->fibers.data();
    unsigned n = W->nthreads;
    Fiber* first = nullptr;
    for (unsigned i = 0; i < n; ++i)
        if (W->st[F[i].linear] == F_BAR) { first = &F[i]; break; }
    for (unsigned i = 0; i < n; ++i) {
        if (W->st[F[i].linear] != F_BAR || same_site(F[i], *first)) continue;
        Fiber* other = &F[i];
        unsigned c1 = 0, c2 = 0;
        for (unsigned j = 0; j < n; ++j) {
            if (W->st[F[j].linear] != F_BAR) continue;
            if (same_site(F[j], *first)) ++c1;
            else if (same_site(F[j], *other)) ++c2;
        }
        claim_failure();
        emit("barrier_divergence",
             fmt("%s:%d: block %s of kernel %s: threads wait at different __syncthreads: %u (e.g. thread %s) at "
                 "%s:%d and %u (e.g. thread %s) at %s:%d; a barrier must be reached by every thread of the block",
                 base_name(first->wfile), first->wline, coords(W->bidx).c_str(), g_L.info.kernel, c1,
                 coords(first->tid).c_str(), base_name(first->wfile), first->wline, c2, coords(other->tid).c_str(),
                 base_name(other->wfile), other->wline));
    }
    if (W->n_exited) {
        Fiber* gone = nullptr;
        for (unsigned i = 0; i < n; ++i)
            if (W->st[F[i].linear] == F_DONE) { gone = &F[i]; break; }
        claim_failure();
        emit("barrier_divergence",
             fmt("%s:%d: block %s of kernel %s: %u threads wait at __syncthreads but %u threads of the block "
                 "have already exited (e.g. thread %s): a return before a barrier (undefined behaviour in CUDA)",
                 base_name(first->wfile), first->wline, coords(W->bidx).c_str(), g_L.info.kernel, W->n_bar,
                 W->n_exited, coords(gone->tid).c_str()));
    }
    int count = 0, all = 1, any = 0;
    for (unsigned i = 0; i < n; ++i) {
        count += F[i].pred != 0;
        all &= F[i].pred != 0;
        any |= F[i].pred != 0;
    }
    int res = first->bar_op == 0 ? count : first->bar_op == 1 ? all : any;
    for (unsigned i = 0; i < n; ++i) {
        W->st[F[i].linear] = F_RUN;
        F[i].bar_result = res;
    }
    W->n_bar = 0;
    W->epoch++;  // a new barrier interval for the race checker
}

const char* op_name(int op) {
    switch (op) {
        case OP_SYNCWARP: return "__syncwarp";
        case OP_SHFL_IDX: return "__shfl_sync";
        case OP_SHFL_UP: return "__shfl_up_sync";
        case OP_SHFL_DOWN: return "__shfl_down_sync";
        case OP_SHFL_XOR: return "__shfl_xor_sync";
        case OP_BALLOT: return "__ballot_sync";
        case OP_ANY: return "__any_sync";
        case OP_ALL: return "__all_sync";
        case OP_MATCH_ANY: return "__match_any_sync";
        case OP_MATCH_ALL: return "__match_all_sync";
        case OP_RED_ADD: return "__reduce_add_sync";
        case OP_RED_MIN: case OP_RED_MIN_S: return "__reduce_min_sync";
        case OP_RED_MAX: case OP_RED_MAX_S: return "__reduce_max_sync";
        case OP_RED_AND: return "__reduce_and_sync";
        case OP_RED_OR: return "__reduce_or_sync";
        case OP_RED_XOR: return "__reduce_xor_sync";
    }
    return "warp collective";
}

[[noreturn]] void report_deadlock(Worker* W) {
    Fiber* F = W->fibers.data();
    unsigned n = W->nthreads;
    std::string parts;
    const Fiber* site = nullptr;
    std::vector<bool> seen(n, false);
    for (unsigned i = 0; i < n; ++i) {
        if (seen[i] || W->st[F[i].linear] == F_DONE || W->st[F[i].linear] == F_RUN) continue;
        unsigned cnt = 0;
        for (unsigned j = i; j < n; ++j)
            if (!seen[j] && W->st[F[j].linear] == W->st[F[i].linear] && same_site(F[j], F[i])) { seen[j] = true; ++cnt; }
        if (!site) site = &F[i];
        const char* what = W->st[F[i].linear] == F_BAR ? "__syncthreads" : W->st[F[i].linear] == F_AMASK ? "__activemask" : op_name(F[i].op);
        std::string extra;
        if (W->st[F[i].linear] == F_WARP) {
            const Warp& w = W->warps[F[i].warp];
            unsigned expected = F[i].mask & w.exist, arrived = 0;
            for (unsigned l = 0; l < 32; ++l)
                if ((expected >> l & 1) && W->st[F[i].warp * 32 + l] == F_WARP) arrived |= 1u << l;
            extra = fmt(" (warp %u, mask 0x%08x, lanes never arriving 0x%08x)", F[i].warp, F[i].mask, expected & ~arrived);
        }
        parts += fmt("%s%u threads (e.g. thread %s) wait at %s %s:%d%s", parts.empty() ? "" : "; ", cnt,
                     coords(F[i].tid).c_str(), what, base_name(F[i].wfile), F[i].wline, extra.c_str());
    }
    claim_failure();
    emit("deadlock", fmt("%s:%d: block %s of kernel %s: no thread can make progress: %s%s",
                         site ? base_name(site->wfile) : "?", site ? site->wline : 0, coords(W->bidx).c_str(),
                         g_L.info.kernel, parts.c_str(),
                         W->n_exited ? fmt("; %u threads have exited", W->n_exited).c_str() : ""));
}

// ---------------------------------------------------------------------------------------------
// Warp collectives
// ---------------------------------------------------------------------------------------------
uint64_t poison_bits(unsigned size) { return size >= 8 ? ~0ull : ((1ull << (8 * size)) - 1ull); }

void complete_collective(Worker* W, unsigned wp, unsigned G, const Fiber& me) {
    Fiber* L = &W->fibers[wp * 32];
    int op = me.op;
    unsigned ballot = 0;
    if (op == OP_BALLOT || op == OP_ANY || op == OP_ALL)
        for (unsigned j = 0; j < 32; ++j)
            if ((G >> j & 1) && L[j].val) ballot |= 1u << j;
    uint64_t red = 0;
    if (op >= OP_RED_ADD) {
        bool first = true;
        for (unsigned j = 0; j < 32; ++j) {
            if (!(G >> j & 1)) continue;
            uint32_t v = (uint32_t)L[j].val;
            uint32_t r = (uint32_t)red;
            if (first) { r = v; first = false; }
            else switch (op) {
                case OP_RED_ADD: r += v; break;
                case OP_RED_MIN: r = v < r ? v : r; break;
                case OP_RED_MAX: r = v > r ? v : r; break;
                case OP_RED_MIN_S: r = (int32_t)v < (int32_t)r ? v : r; break;
                case OP_RED_MAX_S: r = (int32_t)v > (int32_t)r ? v : r; break;
                case OP_RED_AND: r &= v; break;
                case OP_RED_OR: r |= v; break;
                case OP_RED_XOR: r ^= v; break;
            }
            red = r;
        }
    }
    bool all_equal = true;
    if (op == OP_MATCH_ALL) {
        unsigned lowest = (unsigned)__builtin_ctz(G);
        for (unsigned j = 0; j < 32; ++j)
            if ((G >> j & 1) && L[j].val != L[lowest].val) all_equal = false;
    }
    for (unsigned rest = G; rest; rest &= rest - 1) {
        unsigned j = (unsigned)__builtin_ctz(rest);
        Fiber& g = L[j];
        unsigned wd = (unsigned)g.width;
        unsigned seg = j & ~(wd - 1);
        unsigned src = j;
        uint64_t r = 0;
        switch (op) {
            case OP_SYNCWARP: break;
            case OP_SHFL_IDX: src = seg | ((unsigned)g.arg & (wd - 1)); break;
            case OP_SHFL_UP: src = ((j & (wd - 1)) >= (unsigned)g.arg) ? j - (unsigned)g.arg : j; break;
            case OP_SHFL_DOWN: src = ((j & (wd - 1)) + (unsigned)g.arg < wd) ? j + (unsigned)g.arg : j; break;
            case OP_SHFL_XOR: {
                unsigned s = j ^ (unsigned)g.arg;
                src = (s < 32 && (s & ~(wd - 1)) == seg) ? s : j;
                break;
            }
            case OP_BALLOT: r = ballot; break;
            case OP_ANY: r = ballot != 0; break;
            case OP_ALL: r = ballot == G; break;
            case OP_MATCH_ANY:
                for (unsigned k = 0; k < 32; ++k)
                    if ((G >> k & 1) && L[k].val == g.val) r |= 1ull << k;
                break;
            case OP_MATCH_ALL: r = all_equal ? G : 0; break;
            default: r = red; break;
        }
        if (op >= OP_SHFL_IDX && op <= OP_SHFL_XOR)
            r = (G >> src & 1) ? L[src].val : poison_bits(g.vsize);  // a non-participating source: undefined
        g.result = r;
        W->st[g.linear] = F_RUN;
    }
    W->warps[wp].ws++;
}

void check_exit_against_collectives(Worker* W, Fiber* f) {
    Fiber* L = &W->fibers[f->warp * 32];
    const Warp& w = W->warps[f->warp];
    for (unsigned j = 0; j < 32; ++j) {
        if (!(w.exist >> j & 1) || W->st[L[j].linear] != F_WARP) continue;
        if ((L[j].mask >> f->lane) & 1) {
            claim_failure();
            emit("barrier_divergence",
                 fmt("%s:%d: block %s of kernel %s: thread %s (lane %u of warp %u) exited while thread %s waits for "
                     "it in %s (mask 0x%08x): every lane named in the mask must reach the collective",
                     base_name(L[j].wfile), L[j].wline, coords(W->bidx).c_str(), g_L.info.kernel,
                     coords(f->tid).c_str(), f->lane, f->warp, coords(L[j].tid).c_str(), op_name(L[j].op), L[j].mask));
        }
    }
}

void try_release_amask(Worker* W, unsigned wp) {
    Fiber* L = &W->fibers[wp * 32];
    const Warp& w = W->warps[wp];
    unsigned live = w.exist & ~w.exited;
    const Fiber* site = nullptr;
    unsigned at = 0;
    for (unsigned j = 0; j < 32; ++j) {
        if (!(live >> j & 1)) continue;
        if (W->st[L[j].linear] != F_AMASK) return;
        if (!site) site = &L[j];
        else if (!same_site(L[j], *site)) return;
        at |= 1u << j;
    }
    if (!at) return;
    for (unsigned j = 0; j < 32; ++j)
        if (at >> j & 1) {
            L[j].result = at;
            W->st[L[j].linear] = F_RUN;
            W->n_amask--;
        }
}

// Nothing else can run: every lane waiting in __activemask learns which lanes reached the same site.
void resolve_amask_all(Worker* W) {
    Fiber* F = W->fibers.data();
    for (unsigned i = 0; i < W->nthreads; ++i) {
        if (W->st[F[i].linear] != F_AMASK) continue;
        unsigned at = 0;
        Fiber* L = &F[F[i].warp * 32];
        for (unsigned j = 0; j < 32; ++j)
            if ((W->warps[F[i].warp].exist >> j & 1) && W->st[L[j].linear] == F_AMASK && same_site(L[j], F[i])) at |= 1u << j;
        for (unsigned j = 0; j < 32; ++j)
            if (at >> j & 1) {
                L[j].result = at;
                W->st[L[j].linear] = F_RUN;
                W->n_amask--;
            }
    }
}

// ---------------------------------------------------------------------------------------------
// Device heap
// ---------------------------------------------------------------------------------------------
void heap_init() {
    if (g_heap_lo) return;
#ifndef KS_MODE_ASAN
    void* p = mmap(nullptr, kHeapSpan, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) fail("unsupported", "cannot reserve the device heap");
    g_heap_lo = (uintptr_t)p;
    g_heap_span = kHeapSpan;
    g_heap_bump = g_heap_lo;
#endif
}

Alloc* find_alloc_locked(uintptr_t a) {
    auto it = std::upper_bound(g_allocs.begin(), g_allocs.end(), a, [](uintptr_t v, const Alloc* x) { return v < x->base; });
    if (it == g_allocs.begin()) return nullptr;
    return *(it - 1);
}

// The live buffer holding [p, p+n), or nullptr.
Alloc* live_range(const void* p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    Alloc* A = find_alloc_locked(a);
    if (!A || A->freed || a - A->base > A->size || n > A->size - (a - A->base)) return nullptr;
    return A;
}

}  // namespace

bool is_device_pointer(const void* p) {
    std::lock_guard<std::mutex> lk(g_alloc_mu);
    return live_range(p, 0) != nullptr;
}

cudaError_t func_set_attribute(cudaFuncAttribute attr, int value) {
    if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
        if (value < 0 || (size_t)value > kSmemLimit) return cudaErrorInvalidValue;
        if ((size_t)value > g_max_dyn_attr) g_max_dyn_attr = (size_t)value;
    }
    return cudaSuccess;
}

// ---------------------------------------------------------------------------------------------
// Shared memory
// ---------------------------------------------------------------------------------------------
void* shared_alloc(size_t size, size_t align, const char* file, int line, const char* name) {
    Worker* W = current_worker_or_die("a __shared__ declaration");
    size_t a = align < 16 ? 16 : align;
    size_t off = round_up(W->bump, a);
    W->static_bytes += size;
    if (g_L.info.smem + W->static_bytes > kSmemLimit || off + size + kRedZone > kArenaCap)
        fail_here("launch_config", file, line,
                  fmt("kernel %s uses %zu bytes of shared memory per block (static %zu + dynamic %zu), more than "
                      "the %zu available",
                      g_L.info.kernel, g_L.info.smem + W->static_bytes, W->static_bytes, g_L.info.smem, kSmemLimit));
    W->bump = off + size + kRedZone;
    poison_range(W, off, size);
    mark_valid(W, off, size);
    W->vars.push_back(SVar{off, size, file, line, name});
    return W->arena + off;
}

void* dynamic_shared_base() {
    Worker* W = current_worker_or_die("extern __shared__");
    return W->arena + kDynOff;
}

int register_dynamic_shared_setter(void (*setter)(void*)) {
    dyn_setters().push_back(setter);
    return (int)dyn_setters().size();
}

// ---------------------------------------------------------------------------------------------
// Barriers, warp collectives, fences
// ---------------------------------------------------------------------------------------------
void syncthreads(const char* file, int line) { syncthreads_reduce(-1, 0, file, line); }

int syncthreads_reduce(int op, int pred, const char* file, int line) {
    Worker* W = current_worker_or_die("__syncthreads");
    Fiber* f = W->cur;
    W->st[f->linear] = F_BAR;
    f->wfile = file;
    f->wline = line;
    f->bar_op = op;
    f->pred = pred;
    W->n_bar++;
    yield_to_scheduler(W, f);
    return f->bar_result;
}

uint64_t warp_collective(int op, unsigned mask, uint64_t value, unsigned size, int arg, int width, const char* file,
                         int line) {
    Worker* W = current_worker_or_die(op_name(op));
    Fiber* f = W->cur;
    unsigned wp = f->warp, lane = f->lane;
    Warp& w = W->warps[wp];
    if (!((mask >> lane) & 1))
        fail_here("barrier_divergence", file, line,
                  fmt("%s: %s calls %s with mask 0x%08x, which does not include its own lane %u", g_L.info.kernel,
                      who(W, f).c_str(), op_name(op), mask, lane));
    if (op >= OP_SHFL_IDX && op <= OP_SHFL_XOR && (width < 1 || width > 32 || (width & (width - 1))))
        fail_here("unsupported", file, line,
                  fmt("%s: width %d is not a power of two in [1, 32] (%s)", op_name(op), width, who(W, f).c_str()));
    unsigned G = mask & w.exist;
    if (G & w.exited) {
        unsigned gone = (unsigned)__builtin_ctz(G & w.exited);
        fail_here("barrier_divergence", file, line,
                  fmt("%s: %s waits in %s (mask 0x%08x) for lane %u of warp %u, which has already exited",
                      g_L.info.kernel, who(W, f).c_str(), op_name(op), mask, gone, wp));
    }
    f->op = op;
    f->mask = mask;
    f->val = value;
    f->vsize = size;
    f->arg = arg;
    f->width = width;
    f->wfile = file;
    f->wline = line;
    W->st[f->linear] = F_WARP;
    Fiber* L = &W->fibers[wp * 32];
    auto mismatch = [&](unsigned j) {
        const Fiber& g = L[j];
        if (g.mask != mask || g.op != op || (op >= OP_SHFL_IDX && op <= OP_SHFL_XOR && g.width != width))
            fail_here("barrier_divergence", file, line,
                      fmt("%s: warp %u of block %s: lane %u calls %s with mask 0x%08x while lane %u waits in %s "
                          "(%s:%d) with mask 0x%08x",
                          g_L.info.kernel, wp, coords(W->bidx).c_str(), lane, op_name(op), mask, j, op_name(g.op),
                          base_name(g.wfile), g.wline, g.mask));
    };
    unsigned others = G & w.arrived;
    if (others) mismatch((unsigned)__builtin_ctz(others));
    w.arrived |= 1u << lane;
    if (G & ~w.arrived) {
        yield_to_scheduler(W, f);
        return f->result;
    }
    for (unsigned rest = G & ~(1u << lane); rest; rest &= rest - 1) mismatch((unsigned)__builtin_ctz(rest));
    w.arrived &= ~G;
    complete_collective(W, wp, G, *f);
    return f->result;
}

unsigned activemask(const char* file, int line) {
    Worker* W = current_worker_or_die("__activemask");
    Fiber* f = W->cur;
    W->st[f->linear] = F_AMASK;
    f->wfile = file;
    f->wline = line;
    W->n_amask++;
    try_release_amask(W, f->warp);
    if (W->st[f->linear] == F_AMASK) yield_to_scheduler(W, f);
    return (unsigned)f->result;
}

void misaligned_cast(const char* file, int line, const void* p, size_t align) {
    Worker* W = t_worker;
    if (!W || !W->cur) return;  // host code: only a kernel's accesses matter
    fail_here("oob", file, line,
              fmt("%s casts address %p to a pointer to a %zu-byte-aligned vector type; the address is not a "
                  "multiple of %zu (a vector load or store through it faults on the GPU: misaligned address)",
                  who(W, W->cur).c_str(), p, align, align));
}

void threadfence() {
    g_L.fence.store(true, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);
}

void yield_spin() {
    Worker* W = t_worker;
    if (!W || !W->cur) return;
    W->cur->spin = 0;
    yield_to_scheduler(W, W->cur);
}

// ---------------------------------------------------------------------------------------------
// Launch
// ---------------------------------------------------------------------------------------------
namespace {

struct CrossRace {
    std::atomic<bool> set{false};
    std::string where_now, access, other, buffer;
};
CrossRace& g_xrace = *new CrossRace();

void worker_do_launch(Worker* W) {
    ensure_stacks(W, g_L.nthreads);
    for (Alloc*& a : W->alloc_cache) a = nullptr;
    for (;;) {
        uint64_t k = g_L.next.fetch_add(1, std::memory_order_relaxed);
        if (k >= g_L.nblocks) break;
        run_block(W, g_L.reverse ? g_L.nblocks - 1 - k : k);
    }
}

void pool_thread_main(Worker* W) {
    init_worker_thread(W);
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lk(g_pool_mu);
            g_pool_cv.wait(lk, [&] { return g_pool_gen != seen; });
            seen = g_pool_gen;
        }
        worker_do_launch(W);
        std::lock_guard<std::mutex> lk(g_pool_mu);
        if (--g_pool_active == 0) g_done_cv.notify_all();
    }
}

unsigned env_uint(const char* name, unsigned dflt) {
    const char* v = getenv(name);
    if (!v || !*v) return dflt;
    long x = strtol(v, nullptr, 10);
    return x > 0 ? (unsigned)x : dflt;
}

void ensure_pool() {
    if (!g_workers.empty()) return;
#ifdef KS_MODE_ASAN
    g_stack_kb = env_uint("KS_STACK_KB", 256);
#else
    g_stack_kb = env_uint("KS_STACK_KB", 64);
#endif
    unsigned hw = std::thread::hardware_concurrency();
    unsigned n = env_uint("KS_THREADS", hw ? hw : 1);
    if (n > 256) n = 256;
    install_signal_handlers();
    for (unsigned i = 0; i < n; ++i) {
        Worker* W = new Worker();
        W->id = (int)i;
        g_workers.push_back(W);
    }
    init_worker_thread(g_workers[0]);  // the launching thread is worker 0
    for (unsigned i = 1; i < n; ++i) std::thread(pool_thread_main, g_workers[i]).detach();
    g_multi = n > 1;
}

std::string dim_str(const dim3& d) { return fmt("(%u,%u,%u)", d.x, d.y, d.z); }

}  // namespace

void run_launch(const LaunchInfo& info) {
    if (t_worker && t_worker->cur)
        fail_here("unsupported", info.file, info.line,
                  fmt("kernel %s launched from device code (dynamic parallelism)", info.kernel));
    const dim3& g = info.grid;
    const dim3& b = info.block;
    std::string cfg = fmt("%s<<<%s, %s, %zu>>>", info.kernel, dim_str(g).c_str(), dim_str(b).c_str(), info.smem);
    uint64_t threads = (uint64_t)b.x * b.y * b.z;
    if (b.x == 0 || b.y == 0 || b.z == 0 || g.x == 0 || g.y == 0 || g.z == 0)
        fail_here("launch_config", info.file, info.line, cfg + ": a grid or block dimension is 0");
    if (threads > 1024)
        fail_here("launch_config", info.file, info.line,
                  cfg + fmt(": %llu threads per block, more than 1024", (unsigned long long)threads));
    if (b.x > 1024 || b.y > 1024 || b.z > 64)
        fail_here("launch_config", info.file, info.line, cfg + ": block dimensions exceed (1024, 1024, 64)");
    if (g.x > 2147483647u || g.y > 65535u || g.z > 65535u)
        fail_here("launch_config", info.file, info.line, cfg + ": grid dimensions exceed (2^31-1, 65535, 65535)");
    if (info.smem > kSmemLimit)
        fail_here("launch_config", info.file, info.line,
                  cfg + fmt(": %zu bytes of dynamic shared memory, more than %zu", info.smem, kSmemLimit));
    if (info.smem > kSmemDefault && info.smem > g_max_dyn_attr)
        fail_here("launch_config", info.file, info.line,
                  cfg + fmt(": %zu bytes of dynamic shared memory need cudaFuncSetAttribute(kernel, "
                            "cudaFuncAttributeMaxDynamicSharedMemorySize, >= %zu) first (the limit without it is 48 KB)",
                            info.smem, info.smem));
    ensure_pool();
    if (t_worker != g_workers[0])
        fail_here("unsupported", info.file, info.line,
                  fmt("kernel %s launched from a second host thread (the CPU executor runs every launch from "
                      "the thread that made the first one)", info.kernel));
    const char* order = getenv("KS_ORDER");
    const char* rc = getenv("KS_RACECHECK");
    g_L.info = info;
    g_L.nblocks = (uint64_t)g.x * g.y * g.z;
    g_L.next.store(0);
    g_L.reverse = order && strcmp(order, "reverse") == 0;
#ifdef KS_MODE_CHECK
    g_L.check = !(rc && strcmp(rc, "0") == 0);
#else
    (void)rc;
    g_L.check = false;
#endif
    g_L.id = ++g_launch_counter;
    if (g_L.id == 0) g_L.id = ++g_launch_counter;
    g_L.nthreads = (unsigned)threads;
    g_L.fence.store(false);
    g_L.ctx_lo = (uintptr_t)info.ctx;
    g_L.ctx_hi = (uintptr_t)info.ctx + info.ctx_size;
    blockDim = b;
    gridDim = g;
    g_xrace.set.store(false);
    unsigned helpers = (unsigned)g_workers.size() - 1;
    if (helpers && g_L.nblocks > 1) {
        std::lock_guard<std::mutex> lk(g_pool_mu);
        g_pool_active = helpers;
        g_pool_gen++;
        g_pool_cv.notify_all();
    } else {
        helpers = 0;
    }
    worker_do_launch(g_workers[0]);
    if (helpers) {
        std::unique_lock<std::mutex> lk(g_pool_mu);
        g_done_cv.wait(lk, [] { return g_pool_active == 0; });
    }
    if (g_xrace.set.load() && !g_L.fence.load()) {
        claim_failure();
        emit("race", fmt("%s: global memory race between blocks in kernel %s (launched at %s:%d): %s %s; %s. "
                         "Blocks run in no fixed order: use atomics, or split the work into separate launches",
                         g_xrace.where_now.c_str(), info.kernel, base_name(info.file), info.line,
                         g_xrace.access.c_str(), g_xrace.buffer.c_str(), g_xrace.other.c_str()));
    }
}

// ---------------------------------------------------------------------------------------------
// Memory checking
// ---------------------------------------------------------------------------------------------
namespace {

enum : int { K_RD = 0, K_WR = 1, K_AT = 2, K_VRD = 3, K_VWR = 4 };

const char* kind_verb(int kind) {
    switch (kind) {
        case K_RD: return "reads";
        case K_WR: return "writes";
        case K_AT: return "atomically updates";
        case K_VRD: return "reads (volatile)";
        default: return "writes (volatile)";
    }
}

const SVar* nearest_var(Worker* W, size_t off, long* delta, bool* after) {
    const SVar* best = nullptr;
    long bestd = 0;
    for (const SVar& v : W->vars) {
        long d;
        bool a;
        if (off >= v.off + v.size) { d = (long)(off - (v.off + v.size)); a = true; }
        else if (off < v.off) { d = (long)(v.off - off); a = false; }
        else { d = 0; a = true; }
        if (!best || d < bestd) { best = &v; bestd = d; *after = a; }
    }
    *delta = bestd;
    return best;
}

std::string var_desc(const SVar& v) {
    if (!v.file) return "the dynamic shared memory (extern __shared__)";
    return fmt("__shared__ %s (%s:%d, %zu bytes)", v.name, base_name(v.file), v.line, v.size);
}

[[noreturn]] __attribute__((noinline)) void shared_oob(Worker* W, Fiber* f, size_t off, size_t n, int kind,
                                                        uintptr_t pc) {
    claim_failure();
    long d = 0;
    bool after = true;
    const SVar* v = nearest_var(W, off, &d, &after);
    std::string what;
    if (!v) {
        what = "outside every __shared__ variable (no shared memory is allocated at this point)";
    } else {
        long lo = (long)off - (long)v->off;
        what = fmt("bytes [%ld, %ld) of %s, which has %zu bytes (%s)", lo, lo + (long)n, var_desc(*v).c_str(),
                   v->size, after ? "past its end" : "before its start");
    }
    emit("oob", fmt("%s: %s %s shared memory out of bounds: %s", where(pc).c_str(), who(W, f).c_str(),
                    kind_verb(kind), what.c_str()));
}

[[noreturn]] __attribute__((noinline)) void misaligned(Worker* W, Fiber* f, uintptr_t a, size_t n, int kind,
                                                        uintptr_t pc, const char* space) {
    claim_failure();
    emit("oob", fmt("%s: %s %s %zu bytes of %s memory at a misaligned address (0x%lx is not a multiple of %zu)",
                    where(pc).c_str(), who(W, f).c_str(), kind_verb(kind), n, space, (unsigned long)a, n));
}

std::string alloc_desc(const Alloc* A) { return fmt("device buffer #%d (%zu bytes)", A->id, A->size); }

[[noreturn]] __attribute__((noinline)) void global_oob(Worker* W, Fiber* f, uintptr_t a, size_t n, int kind,
                                                        uintptr_t pc) {
    claim_failure();
    Alloc* prev = find_alloc_locked(a);
    auto it = std::upper_bound(g_allocs.begin(), g_allocs.end(), a, [](uintptr_t v, const Alloc* x) { return v < x->base; });
    Alloc* next = it == g_allocs.end() ? nullptr : *it;
    Alloc* A = prev;
    if (!prev || (next && a >= prev->base + prev->size && next->base - a < a - (prev->base + prev->size))) A = next;
    std::string what;
    if (!A) {
        what = "outside every device buffer";
    } else {
        long lo = (long)(a - A->base);
        bool inside = a >= A->base && a - A->base < A->size;
        const char* how = inside && A->freed ? "which was freed with cudaFree (use after free)"
                          : a < A->base      ? "before its start"
                                             : "past its end";
        what = fmt("bytes [%ld, %ld) of %s, which has %zu bytes (%s%s)", lo, lo + (long)n,
                   fmt("device buffer #%d", A->id).c_str(), A->size, how,
                   (!inside && A->freed) ? "; the buffer was freed" : "");
    }
    emit("oob", fmt("%s: %s %s global memory out of bounds: %s", where(pc).c_str(), who(W, f).c_str(),
                    kind_verb(kind), what.c_str()));
}

[[noreturn]] __attribute__((noinline)) void host_access(Worker* W, Fiber* f, uintptr_t a, size_t n, int kind,
                                                         uintptr_t pc) {
    claim_failure();
    std::string what = a < 65536 ? fmt("address 0x%lx (a null pointer)", (unsigned long)a)
                                 : fmt("host address 0x%lx, which is not device memory (a host pointer passed to the "
                                       "kernel, or a pointer to another thread's local variable?)",
                                       (unsigned long)a);
    emit("oob", fmt("%s: %s %s %zu bytes at %s", where(pc).c_str(), who(W, f).c_str(), kind_verb(kind), n,
                    what.c_str()));
}

// ---- shared memory races --------------------------------------------------------------------
[[noreturn]] __attribute__((noinline)) void shared_race(Worker* W, Fiber* f, size_t off, int kind, uintptr_t pc,
                                                         uint16_t other, uint32_t other_pc, const char* other_what) {
    claim_failure();
    long d = 0;
    bool after = true;
    const SVar* v = nearest_var(W, off, &d, &after);
    std::string var = v ? fmt("%s at byte %zu", var_desc(*v).c_str(), off - v->off) : "shared memory";
    bool same_warp = other != kMulti && (other >> 5) == f->warp;
    std::string here = where(pc), there = where(other_pc);
    std::string other_who = other == kMulti ? std::string("another thread") : "thread " + coords(tid_coords(other));
    emit("race", fmt("%s: shared memory race in block %s of kernel %s: thread %s %s %s; %s %s it at %s in the "
                     "same barrier interval (%s)",
                     here.c_str(), coords(W->bidx).c_str(), g_L.info.kernel, coords(f->tid).c_str(), kind_verb(kind),
                     var.c_str(), other_who.c_str(), other_what, there.c_str(),
                     same_warp ? "same warp: no __syncthreads, __syncwarp or warp collective between the accesses"
                               : "no __syncthreads between the accesses"));
}

__attribute__((always_inline)) inline void shared_apply(Worker* W, Fiber* f, SCell* c, SCold* k, int kind,
                                                        uintptr_t pc, size_t off) {
    uint16_t tid = f->linear;
    unsigned warp = f->warp;
    uint16_t ws = (uint16_t)W->warps[warp].ws;
    if (c->epoch != W->epoch) {
        c->epoch = W->epoch;
        c->w_tid = c->r_tid = kNone;
        c->flags &= (uint8_t)S_SUB;
        k->o_tid = kNone;
    }
    auto unordered = [&](uint16_t other, uint16_t other_ws) {
        return other != tid && ((unsigned)(other >> 5) != warp || other_ws == ws);
    };
    auto readers_conflict = [&]() {
        if (c->r_tid == kNone) return false;
        if (c->flags & S_RMULTI) return c->r_warp != warp || c->r_ws == ws;
        return unordered(c->r_tid, c->r_ws);
    };
    // a reader this access conflicts with, by name when one of the last two is; else "another thread"
    auto conflicting_reader = [&](uint32_t* rpc) -> uint16_t {
        if (unordered(c->r_tid, c->r_ws)) { *rpc = k->r_pc; return c->r_tid; }
        if ((c->flags & S_RMULTI) && k->o_tid != kNone && unordered(k->o_tid, k->o_ws)) { *rpc = k->o_pc; return k->o_tid; }
        *rpc = k->r_pc;
        return kMulti;
    };
    auto reader_race = [&]() {
        uint32_t rpc = 0;
        uint16_t who = conflicting_reader(&rpc);
        shared_race(W, f, off, kind, pc, who, rpc, "read");
    };
    // atomics by other threads conflict with plain accesses unless they are all by this warp and a
    // warp collective completed since the last of them
    bool atomics_by_others = (c->flags & S_ATOM) && k->a_tid != tid && (k->a_warp != warp || k->a_ws == ws);
    if (kind == K_WR) {
        if (c->w_tid != kNone && unordered(c->w_tid, k->w_ws)) shared_race(W, f, off, kind, pc, c->w_tid, k->w_pc, "wrote");
        if (readers_conflict()) reader_race();
        if (atomics_by_others) shared_race(W, f, off, kind, pc, k->a_tid, k->a_pc, "atomically updated");
        c->w_tid = tid;
        k->w_ws = ws;
        k->w_pc = (uint32_t)pc;
        c->r_tid = kNone;
        c->flags &= (uint8_t)~S_RMULTI;
    } else if (kind == K_RD) {
        if (c->w_tid != kNone && unordered(c->w_tid, k->w_ws)) shared_race(W, f, off, kind, pc, c->w_tid, k->w_pc, "wrote");
        if (atomics_by_others) shared_race(W, f, off, kind, pc, k->a_tid, k->a_pc, "atomically updated");
        if (c->r_tid == kNone || (c->r_warp == warp && c->r_ws != ws)) {
            c->r_tid = tid;
            c->r_warp = (uint8_t)warp;
            c->flags &= (uint8_t)~S_RMULTI;
            k->o_tid = kNone;
        } else if (c->r_tid != tid) {
            c->flags |= S_RMULTI;
            if (c->r_warp != warp) c->r_warp = kMixed;
            k->o_tid = c->r_tid;
            k->o_ws = c->r_ws;
            k->o_pc = k->r_pc;
            c->r_tid = tid;
        }
        c->r_ws = ws;
        k->r_pc = (uint32_t)pc;
    } else {  // atomic
        if (c->w_tid != kNone && unordered(c->w_tid, k->w_ws)) shared_race(W, f, off, kind, pc, c->w_tid, k->w_pc, "wrote");
        if (readers_conflict()) reader_race();
        if (!(c->flags & S_ATOM) || (k->a_warp == warp && k->a_ws != ws)) {
            c->flags |= S_ATOM;
            k->a_tid = tid;
            k->a_warp = (uint8_t)warp;
        } else if (k->a_tid != tid) {
            k->a_tid = kMulti;
            if (k->a_warp != warp) k->a_warp = kMixed;
        }
        k->a_ws = ws;
        k->a_pc = (uint32_t)pc;
    }
}

__attribute__((always_inline)) inline void shared_word(Worker* W, Fiber* f, size_t w, unsigned bm, int kind, uintptr_t pc, size_t off) {
    SCell* c = &W->scell[w];
    if (c->epoch != W->epoch) {
        c->epoch = W->epoch;
        c->w_tid = c->r_tid = kNone;
        c->flags = 0;
        if (bm != 0xf) {
            c->flags = S_SUB;
            for (unsigned b = 0; b < 4; ++b) W->sbyte[w * 4 + b].epoch = 0;
        }
    } else if (!(c->flags & S_SUB) && bm != 0xf) {
        for (unsigned b = 0; b < 4; ++b) {
            W->sbyte[w * 4 + b] = *c;
            W->sbyte[w * 4 + b].flags &= (uint8_t)~S_SUB;
            W->sbcold[w * 4 + b] = W->scold[w];
        }
        c->flags |= S_SUB;
    }
    if (c->flags & S_SUB) {
        for (unsigned b = 0; b < 4; ++b)
            if (bm >> b & 1) shared_apply(W, f, &W->sbyte[w * 4 + b], &W->sbcold[w * 4 + b], kind, pc, w * 4 + b);
    } else {
        shared_apply(W, f, c, &W->scold[w], kind, pc, off);
    }
}

__attribute__((always_inline)) inline void shared_access(Worker* W, Fiber* f, size_t so, size_t n, int kind, bool aligned, uintptr_t pc) {
    if (aligned && (so & (n - 1))) misaligned(W, f, (uintptr_t)W->arena + so, n, kind, pc, "shared");
    size_t w0 = so >> 2, w1 = (so + n - 1) >> 2;
    for (size_t w = w0; w <= w1; ++w)
        if (W->scell[w].valid != W->blk_serial) shared_oob(W, f, so, n, kind, pc);
    if (kind >= K_VRD) return;
    for (size_t w = w0; w <= w1; ++w) {
        size_t lo = w * 4 < so ? so : w * 4, hi = (w * 4 + 4 < so + n) ? w * 4 + 4 : so + n;
        unsigned bm = 0;
        for (size_t b = lo; b < hi; ++b) bm |= 1u << (b & 3);
        shared_word(W, f, w, bm, kind, pc, so);
    }
}

// ---- global memory races --------------------------------------------------------------------
[[noreturn]] __attribute__((noinline)) void global_race(Worker* W, Fiber* f, Alloc* A, uintptr_t a, int kind,
                                                         uintptr_t pc, uint16_t other, uint32_t other_pc,
                                                         const char* other_what) {
    claim_failure();
    bool same_warp = other != kMulti && (other >> 5) == f->warp;
    std::string here = where(pc), there = where(other_pc);
    std::string other_who = other == kMulti ? std::string("another thread") : "thread " + coords(tid_coords(other));
    emit("race", fmt("%s: global memory race in block %s of kernel %s: thread %s %s byte %zu of %s; %s %s it "
                     "at %s in the same barrier interval (%s)",
                     here.c_str(), coords(W->bidx).c_str(), g_L.info.kernel, coords(f->tid).c_str(),
                     kind_verb(kind), (size_t)(a - A->base), alloc_desc(A).c_str(), other_who.c_str(), other_what,
                     there.c_str(),
                     same_warp ? "same warp: no __syncthreads, __syncwarp or warp collective between the accesses"
                               : "no __syncthreads between the accesses"));
}

__attribute__((noinline)) void cross_race(Worker* W, Fiber* f, Alloc* A, uintptr_t a, int kind, uintptr_t pc,
                                          const GCell* c) {
    bool expected = false;
    if (!g_xrace.set.compare_exchange_strong(expected, true)) return;
    const char* prev = (c->flags & G_W) ? "wrote" : (c->flags & G_A) ? "atomically updated" : "read";
    uint3 ob = block_coords(c->block);
    g_xrace.where_now = where(pc);
    g_xrace.access = fmt("thread %s of block %s %s", coords(f->tid).c_str(), coords(W->bidx).c_str(), kind_verb(kind));
    g_xrace.buffer = fmt("byte %zu of %s", (size_t)(a - A->base), alloc_desc(A).c_str());
    g_xrace.other = fmt("block %s %s it at %s in the same launch", coords(ob).c_str(), prev, where(c->pc).c_str());
}

__attribute__((always_inline)) inline void global_apply(Worker* W, Fiber* f, Alloc* A, uintptr_t a, GCell* c, int kind, uintptr_t pc) {
    uint32_t L = g_L.id;
    uint32_t b = (uint32_t)W->block_linear;
    uint16_t tid = f->linear;
    unsigned warp = f->warp;
    uint16_t ep = (uint16_t)W->epoch;
    uint16_t ws = (uint16_t)W->warps[warp].ws;
    uint8_t kf = kind == K_WR ? G_W : kind == K_RD ? G_R : G_A;
    if (c->launch != L) {
        c->launch = L;
        c->block = b;
        c->pc = c->w_pc = c->r_pc = (uint32_t)pc;
        c->epoch = ep;
        c->flags = kf;
        c->w_tid = kind == K_WR ? tid : kNone;
        c->r_tid = kind == K_RD ? tid : kNone;
        c->o_tid = kNone;
        c->w_ws = c->r_ws = ws;
        c->r_warp = (uint8_t)warp;
        return;
    }
    if (c->block != b || (c->flags & G_MB)) {
        bool conflict = kind == K_WR || (kind == K_RD && (c->flags & (G_W | G_A))) ||
                        (kind == K_AT && (c->flags & (G_W | G_R)));
        if (conflict) cross_race(W, f, A, a, kind, pc, c);
        c->flags |= (uint8_t)(G_MB | kf);
        return;
    }
    c->flags |= kf;
    if (kind == K_AT) return;
    if (c->epoch != ep) {
        c->epoch = ep;
        c->w_tid = c->r_tid = c->o_tid = kNone;
        c->flags &= (uint8_t)~G_RMULTI;
    }
    // Another thread's access is unordered with this one unless a warp collective of this warp
    // completed between them (lanes of one warp) — across warps only a barrier orders them.
    auto unordered = [&](uint16_t o, uint16_t o_ws) {
        return o != kNone && o != tid && ((unsigned)(o >> 5) != warp || o_ws == ws);
    };
    if (unordered(c->w_tid, c->w_ws)) global_race(W, f, A, a, kind, pc, c->w_tid, c->w_pc, "wrote");
    if (kind == K_WR) {
        bool rc = (c->flags & G_RMULTI) ? (c->r_warp != warp || c->r_ws == ws) : unordered(c->r_tid, c->r_ws);
        if (c->r_tid != kNone && rc) {
            if (unordered(c->r_tid, c->r_ws)) global_race(W, f, A, a, kind, pc, c->r_tid, c->r_pc, "read");
            if (unordered(c->o_tid, c->o_ws)) global_race(W, f, A, a, kind, pc, c->o_tid, c->o_pc, "read");
            global_race(W, f, A, a, kind, pc, kMulti, c->r_pc, "read");
        }
        c->w_tid = tid;
        c->w_ws = ws;
        c->w_pc = (uint32_t)pc;
        c->r_tid = c->o_tid = kNone;
        c->flags &= (uint8_t)~G_RMULTI;
        c->pc = (uint32_t)pc;
    } else {
        if (c->r_tid == kNone || (c->r_warp == warp && c->r_ws != ws)) {
            c->r_tid = tid;
            c->r_warp = (uint8_t)warp;
            c->o_tid = kNone;
            c->flags &= (uint8_t)~G_RMULTI;
        } else if (c->r_tid != tid) {
            c->flags |= G_RMULTI;
            if (c->r_warp != warp) c->r_warp = kMixed;
            c->o_tid = c->r_tid;
            c->o_ws = c->r_ws;
            c->o_pc = c->r_pc;
            c->r_tid = tid;
        }
        c->r_ws = ws;
        c->r_pc = (uint32_t)pc;
        if (c->w_tid == kNone) c->pc = (uint32_t)pc;
    }
}

struct StripeLock {
    std::atomic<uint8_t>* l = nullptr;
    explicit StripeLock(uintptr_t a) {
        if (!g_multi) return;
        l = &g_stripes[(a >> 12) & (kStripes - 1)].v;
        while (l->exchange(1, std::memory_order_acquire)) {
            while (l->load(std::memory_order_relaxed)) __builtin_ia32_pause();
        }
    }
    ~StripeLock() {
        if (l) l->store(0, std::memory_order_release);
    }
};

__attribute__((always_inline)) inline void global_word(Worker* W, Fiber* f, Alloc* A, uintptr_t a, size_t w, unsigned bm, int kind, uintptr_t pc) {
    GCell* c = &A->cells[w];
    if (c->launch != g_L.id) {
        if (bm != 0xf) {
            c->launch = g_L.id;
            c->flags = G_SUB;
            for (unsigned b = 0; b < 4; ++b) A->bytes[w * 4 + b].launch = 0;
        }
    } else if (!(c->flags & G_SUB) && bm != 0xf) {
        for (unsigned b = 0; b < 4; ++b) {
            A->bytes[w * 4 + b] = *c;
            A->bytes[w * 4 + b].flags &= (uint8_t)~G_SUB;
        }
        c->flags |= G_SUB;
    }
    if (c->launch == g_L.id && (c->flags & G_SUB)) {
        for (unsigned b = 0; b < 4; ++b)
            if (bm >> b & 1) global_apply(W, f, A, A->base + w * 4 + b, &A->bytes[w * 4 + b], kind, pc);
    } else {
        global_apply(W, f, A, a, c, kind, pc);
    }
}

inline Alloc* lookup_alloc(Worker* W, uintptr_t a) {
    for (Alloc* A : W->alloc_cache)
        if (A && a - A->base < A->size) return A;
    return nullptr;
}

__attribute__((always_inline)) inline void global_access(Worker* W, Fiber* f, uintptr_t a, size_t n, int kind, bool aligned, uintptr_t pc) {
    Alloc* A = lookup_alloc(W, a);
    if (!A) {
        A = find_alloc_locked(a);
        if (!A || A->freed || a - A->base >= A->size) global_oob(W, f, a, n, kind, pc);
        W->alloc_cache[W->alloc_next++ & 3] = A;
    }
    if (n > A->size - (a - A->base)) global_oob(W, f, a, n, kind, pc);
    if (aligned && (a & (n - 1))) misaligned(W, f, a, n, kind, pc, "global");
    if (kind >= K_VRD) return;
    size_t off = a - A->base;
    size_t w0 = off >> 2, w1 = (off + n - 1) >> 2;
    StripeLock lock(a);
    for (size_t w = w0; w <= w1; ++w) {
        size_t lo = w * 4 < off ? off : w * 4, hi = (w * 4 + 4 < off + n) ? w * 4 + 4 : off + n;
        unsigned bm = 0;
        for (size_t b = lo; b < hi; ++b) bm |= 1u << (b & 3);
        global_word(W, f, A, a, w, bm, kind, pc);
    }
}

__attribute__((noinline)) void check_access(Worker* W, uintptr_t a, size_t n, int kind, bool aligned, uintptr_t pc) {
    Fiber* f = W->cur;
    if (a - (uintptr_t)f->stack_lo < f->stack_size) return;
    uintptr_t so = a - (uintptr_t)W->arena;
    if (so < kArenaCap) {
        shared_access(W, f, so, n, kind, aligned, pc);
        return;
    }
    if (a - g_heap_lo < g_heap_span) {
        global_access(W, f, a, n, kind, aligned, pc);
        return;
    }
    if (a - (uintptr_t)__executable_start < (uintptr_t)(_end - __executable_start)) return;  // __constant__, __device__
    if (a - W->tls_lo < W->tls_hi - W->tls_lo) return;
    if (a - g_L.ctx_lo < g_L.ctx_hi - g_L.ctx_lo) return;  // kernel arguments being copied
    host_access(W, f, a, n, kind, pc);
}

// Fast paths for the commonest case, a plain aligned 4-byte read that changes no shadow state:
// a word of shared memory already read in this barrier interval by several warps (or by this
// thread, or by several threads of this warp since its last collective) and written by nobody;
// a device word already read by several blocks in this launch and written by nobody. Returning
// early is exactly what the general path would do, minus bookkeeping used only in messages.
inline bool shared_read_fast(Worker* W, Fiber* f, size_t so) {
    const SCell* c = &W->scell[so >> 2];
    if (c->valid != W->blk_serial || c->epoch != W->epoch) return false;
    if ((c->flags & (S_SUB | S_ATOM)) || c->w_tid != kNone) return false;
    if (c->flags & S_RMULTI) {
        if (c->r_warp == kMixed) return true;
        return c->r_warp == f->warp && c->r_ws == (uint16_t)W->warps[f->warp].ws;
    }
    return c->r_tid == f->linear && c->r_ws == (uint16_t)W->warps[f->warp].ws;
}

inline bool global_read_fast(Worker* W, uintptr_t a) {
    Alloc* A = lookup_alloc(W, a);
    if (!A || A->size < 4 || a - A->base > A->size - 4) return false;
    const GCell* c = &A->cells[(a - A->base) >> 2];
    return c->launch == g_L.id && (c->flags & (G_MB | G_W | G_A | G_SUB)) == G_MB;
}

// Aligned 4-byte plain accesses (most of a kernel's traffic) take a straight path.
template <int Kind>
__attribute__((always_inline)) inline void access4(Worker* W, uintptr_t a, uintptr_t pc) {
    Fiber* f = W->cur;
    if (a - (uintptr_t)f->stack_lo < f->stack_size) return;
    if (!(a & 3)) {
        uintptr_t so = a - (uintptr_t)W->arena;
        if (so < kArenaCap) {
            if (Kind == K_RD && shared_read_fast(W, f, so)) return;
            size_t w = so >> 2;
            if (W->scell[w].valid != W->blk_serial) shared_oob(W, f, so, 4, Kind, pc);
            shared_word(W, f, w, 0xf, Kind, pc, so);
            return;
        }
        if (a - g_heap_lo < g_heap_span) {
            if (Kind == K_RD && global_read_fast(W, a)) return;
            Alloc* A = lookup_alloc(W, a);
            if (A && A->size >= 4 && a - A->base <= A->size - 4) {
                StripeLock lock(a);
                global_word(W, f, A, a, (a - A->base) >> 2, 0xf, Kind, pc);
                return;
            }
        }
    }
    check_access(W, a, 4, Kind, true, pc);
}

inline void spin_tick(Worker* W) {
    Fiber* f = W->cur;
    if (++f->spin >= kSpinYield) {
        f->spin = 0;
        yield_to_scheduler(W, f);
    }
}

}  // namespace
}  // namespace ks

// ---------------------------------------------------------------------------------------------
// ThreadSanitizer callbacks (the kernel TU is instrumented; libtsan is not linked)
// ---------------------------------------------------------------------------------------------
#define KS_PC ((uintptr_t)__builtin_return_address(0))

static inline __attribute__((always_inline)) void ks_plain(void* p, size_t n, int kind, bool aligned, uintptr_t pc) {
    ks::Worker* W = ks::t_chk;
    if (!W) return;
    ks::Fiber* f = W->cur;
    if ((uintptr_t)p - (uintptr_t)f->stack_lo < f->stack_size) return;  // the thread's own locals
    ks::check_access(W, (uintptr_t)p, n, kind, aligned, pc);
}
static inline void ks_special(void* p, size_t n, int kind, uintptr_t pc) {
    ks::Worker* W = ks::t_worker;
    if (!W || !W->cur) return;
    ks::spin_tick(W);
    if (ks::t_chk) ks::check_access(W, (uintptr_t)p, n, kind, kind == ks::K_AT, pc);
}

extern "C" {
void __tsan_init() {}
void __tsan_func_entry(void*) {}
void __tsan_func_exit() {}

void __tsan_read4(void* p) {
    ks::Worker* W = ks::t_chk;
    if (W) ks::access4<ks::K_RD>(W, (uintptr_t)p, KS_PC);
}
void __tsan_write4(void* p) {
    ks::Worker* W = ks::t_chk;
    if (W) ks::access4<ks::K_WR>(W, (uintptr_t)p, KS_PC);
}
#define KS_RW(N)                                                                                  \
    KS_READ_##N                                                                                   \
    KS_WRITE_##N                                                                                  \
    void __tsan_volatile_read##N(void* p) { ks_special(p, N, ks::K_VRD, KS_PC); }                \
    void __tsan_volatile_write##N(void* p) { ks_special(p, N, ks::K_VWR, KS_PC); }
#define KS_READ_1 void __tsan_read1(void* p) { ks_plain(p, 1, ks::K_RD, false, KS_PC); }
#define KS_READ_2 void __tsan_read2(void* p) { ks_plain(p, 2, ks::K_RD, true, KS_PC); }
#define KS_READ_4
#define KS_READ_8 void __tsan_read8(void* p) { ks_plain(p, 8, ks::K_RD, true, KS_PC); }
#define KS_READ_16 void __tsan_read16(void* p) { ks_plain(p, 16, ks::K_RD, true, KS_PC); }
#define KS_WRITE_1 void __tsan_write1(void* p) { ks_plain(p, 1, ks::K_WR, false, KS_PC); }
#define KS_WRITE_2 void __tsan_write2(void* p) { ks_plain(p, 2, ks::K_WR, true, KS_PC); }
#define KS_WRITE_4
#define KS_WRITE_8 void __tsan_write8(void* p) { ks_plain(p, 8, ks::K_WR, true, KS_PC); }
#define KS_WRITE_16 void __tsan_write16(void* p) { ks_plain(p, 16, ks::K_WR, true, KS_PC); }
KS_RW(1)
KS_RW(2)
KS_RW(4)
KS_RW(8)
KS_RW(16)
#undef KS_RW
#define KS_URW(N)                                                                                 \
    void __tsan_unaligned_read##N(void* p) { ks_plain(p, N, ks::K_RD, false, KS_PC); }           \
    void __tsan_unaligned_write##N(void* p) { ks_plain(p, N, ks::K_WR, false, KS_PC); }          \
    void __tsan_unaligned_volatile_read##N(void* p) { ks_special(p, N, ks::K_VRD, KS_PC); }      \
    void __tsan_unaligned_volatile_write##N(void* p) { ks_special(p, N, ks::K_VWR, KS_PC); }
KS_URW(2)
KS_URW(4)
KS_URW(8)
KS_URW(16)
#undef KS_URW
void __tsan_read_range(void* p, unsigned long n) {
    if (n) ks_plain(p, n, ks::K_RD, false, KS_PC);
}
void __tsan_write_range(void* p, unsigned long n) {
    if (n) ks_plain(p, n, ks::K_WR, false, KS_PC);
}
void __tsan_vptr_read(void** p) { ks_plain(p, sizeof(void*), ks::K_RD, false, KS_PC); }
void __tsan_vptr_update(void** p, void*) { ks_plain(p, sizeof(void*), ks::K_WR, false, KS_PC); }

void __tsan_atomic_thread_fence(int) { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
void __tsan_atomic_signal_fence(int) { __atomic_signal_fence(__ATOMIC_SEQ_CST); }

#define KS_SEQ __ATOMIC_SEQ_CST
#define KS_ATOMICS(N, T)                                                                                    \
    T __tsan_atomic##N##_load(const volatile T* a, int) {                                                  \
        ks_special((void*)a, sizeof(T), ks::K_AT, KS_PC);                                                  \
        return __atomic_load_n(a, KS_SEQ);                                                                 \
    }                                                                                                      \
    void __tsan_atomic##N##_store(volatile T* a, T v, int) {                                               \
        ks_special((void*)a, sizeof(T), ks::K_AT, KS_PC);                                                  \
        __atomic_store_n(a, v, KS_SEQ);                                                                    \
    }                                                                                                      \
    T __tsan_atomic##N##_exchange(volatile T* a, T v, int) {                                               \
        ks_special((void*)a, sizeof(T), ks::K_AT, KS_PC);                                                  \
        return __atomic_exchange_n(a, v, KS_SEQ);                                                          \
    }                                                                                                      \
    T __tsan_atomic##N##_fetch_add(volatile T* a, T v, int) {                                              \
        ks_special((void*)a, sizeof(T), ks::K_AT, KS_PC);                                                  \
        return __atomic_fetch_add(a, v, KS_SEQ);                                                           \
    }                                                                                                      \
    T __tsan_atomic##N##_fetch_sub(volatile T* a, T v, int) {                                              \
        ks_special((void*)a, sizeof(T), ks::K_AT, KS_PC);                                                  \
        return __atomic_fetch_sub(a, v, KS_SEQ);                                                           \
    }                                                                                                      \
    T __tsan_atomic##N##_fetch_and(volatile T* a, T v, int) {                                              \
        ks_special((void*)a, sizeof(T), ks::K_AT, KS_PC);                                                  \
        return __atomic_fetch_and(a, v, KS_SEQ);                                                           \
    }                                                                                                      \
    T __tsan_atomic##N##_fetch_or(volatile T* a, T v, int) {                                               \
        ks_special((void*)a, sizeof(T), ks::K_AT, KS_PC);                                                  \
        return __atomic_fetch_or(a, v, KS_SEQ);                                                            \
    }                                                                                                      \
    T __tsan_atomic##N##_fetch_xor(volatile T* a, T v, int) {                                              \
        ks_special((void*)a, sizeof(T), ks::K_AT, KS_PC);                                                  \
        return __atomic_fetch_xor(a, v, KS_SEQ);                                                           \
    }                                                                                                      \
    T __tsan_atomic##N##_fetch_nand(volatile T* a, T v, int) {                                             \
        ks_special((void*)a, sizeof(T), ks::K_AT, KS_PC);                                                  \
        return __atomic_fetch_nand(a, v, KS_SEQ);                                                          \
    }                                                                                                      \
    int __tsan_atomic##N##_compare_exchange_strong(volatile T* a, T* c, T v, int, int) {                   \
        ks_special((void*)a, sizeof(T), ks::K_AT, KS_PC);                                                  \
        return __atomic_compare_exchange_n(a, c, v, false, KS_SEQ, KS_SEQ);                                \
    }                                                                                                      \
    int __tsan_atomic##N##_compare_exchange_weak(volatile T* a, T* c, T v, int, int) {                     \
        ks_special((void*)a, sizeof(T), ks::K_AT, KS_PC);                                                  \
        return __atomic_compare_exchange_n(a, c, v, false, KS_SEQ, KS_SEQ);                                \
    }                                                                                                      \
    T __tsan_atomic##N##_compare_exchange_val(volatile T* a, T c, T v, int, int) {                         \
        ks_special((void*)a, sizeof(T), ks::K_AT, KS_PC);                                                  \
        __atomic_compare_exchange_n(a, &c, v, false, KS_SEQ, KS_SEQ);                                      \
        return c;                                                                                          \
    }
KS_ATOMICS(8, int8_t)
KS_ATOMICS(16, int16_t)
KS_ATOMICS(32, int32_t)
KS_ATOMICS(64, int64_t)
#undef KS_ATOMICS

// 128-bit atomics: rare in kernels; done under one lock (no cmpxchg16b dependency).
static std::mutex& ks_a128_mu = *new std::mutex();
typedef __int128 ks_i128;
#define KS_A128_RMW(name, expr)                                                                             \
    ks_i128 __tsan_atomic128_##name(volatile ks_i128* a, ks_i128 v, int) {                                \
        ks_special((void*)a, 16, ks::K_AT, KS_PC);                                                         \
        std::lock_guard<std::mutex> lk(ks_a128_mu);                                                        \
        ks_i128 old = *a;                                                                                  \
        *a = (expr);                                                                                       \
        return old;                                                                                        \
    }
KS_A128_RMW(exchange, v)
KS_A128_RMW(fetch_add, old + v)
KS_A128_RMW(fetch_sub, old - v)
KS_A128_RMW(fetch_and, old & v)
KS_A128_RMW(fetch_or, old | v)
KS_A128_RMW(fetch_xor, old ^ v)
KS_A128_RMW(fetch_nand, ~(old & v))
#undef KS_A128_RMW
ks_i128 __tsan_atomic128_load(const volatile ks_i128* a, int) {
    ks_special((void*)a, 16, ks::K_AT, KS_PC);
    std::lock_guard<std::mutex> lk(ks_a128_mu);
    return *a;
}
void __tsan_atomic128_store(volatile ks_i128* a, ks_i128 v, int) {
    ks_special((void*)a, 16, ks::K_AT, KS_PC);
    std::lock_guard<std::mutex> lk(ks_a128_mu);
    *a = v;
}
static int ks_cas128(volatile ks_i128* a, ks_i128* c, ks_i128 v) {
    std::lock_guard<std::mutex> lk(ks_a128_mu);
    if (*a == *c) {
        *a = v;
        return 1;
    }
    *c = *a;
    return 0;
}
int __tsan_atomic128_compare_exchange_strong(volatile ks_i128* a, ks_i128* c, ks_i128 v, int, int) {
    ks_special((void*)a, 16, ks::K_AT, KS_PC);
    return ks_cas128(a, c, v);
}
int __tsan_atomic128_compare_exchange_weak(volatile ks_i128* a, ks_i128* c, ks_i128 v, int, int) {
    ks_special((void*)a, 16, ks::K_AT, KS_PC);
    return ks_cas128(a, c, v);
}
ks_i128 __tsan_atomic128_compare_exchange_val(volatile ks_i128* a, ks_i128 c, ks_i128 v, int, int) {
    ks_special((void*)a, 16, ks::K_AT, KS_PC);
    ks_cas128(a, &c, v);
    return c;
}
}  // extern "C"

// ---------------------------------------------------------------------------------------------
// Host API
// ---------------------------------------------------------------------------------------------
using ks::Alloc;

cudaError_t cudaMalloc(void** ptr, size_t size) {
    if (!ptr) return cudaErrorInvalidValue;
    std::lock_guard<std::mutex> lk(ks::g_alloc_mu);
    ks::heap_init();
    Alloc* A = new Alloc();
    A->size = size;
    A->id = ++ks::g_alloc_ids;
    A->freed = false;
#ifdef KS_MODE_ASAN
    void* p = nullptr;
    if (posix_memalign(&p, 256, size ? size : 1) != 0) {
        delete A;
        *ptr = nullptr;
        return cudaErrorMemoryAllocation;
    }
    memset(p, 0xff, size);
    A->base = (uintptr_t)p;
    A->map_lo = A->base;
    A->map_len = size;
    A->cells = A->bytes = nullptr;
    A->ncells = 0;
    auto it = std::upper_bound(ks::g_allocs.begin(), ks::g_allocs.end(), A->base,
                               [](uintptr_t v, const Alloc* x) { return v < x->base; });
    ks::g_allocs.insert(it, A);
#else
    uintptr_t lo = ks::round_up(ks::g_heap_bump + ks::kHeapGap, ks::kPage);
    size_t len = ks::round_up(ks::kBufFrontRz + size + ks::kBufBackRz, ks::kPage);
    if (lo + len + ks::kHeapGap > ks::g_heap_lo + ks::g_heap_span) {
        delete A;
        *ptr = nullptr;
        return cudaErrorMemoryAllocation;
    }
    if (mprotect((void*)lo, len, PROT_READ | PROT_WRITE) != 0) {
        delete A;
        *ptr = nullptr;
        return cudaErrorMemoryAllocation;
    }
    memset((void*)lo, 0xff, len);  // fresh device memory and red zones read as NaN / -1
    ks::g_heap_bump = lo + len;
    A->map_lo = lo;
    A->map_len = len;
    A->base = lo + ks::kBufFrontRz;
    A->ncells = size / 4 + 1;
    A->cells = static_cast<ks::GCell*>(ks::map_or_die(A->ncells * sizeof(ks::GCell), PROT_READ | PROT_WRITE));
    A->bytes = static_cast<ks::GCell*>(ks::map_or_die(A->ncells * 4 * sizeof(ks::GCell), PROT_READ | PROT_WRITE));
    ks::g_allocs.push_back(A);
#endif
    *ptr = (void*)A->base;
    return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
    if (!ptr) return cudaSuccess;
    std::lock_guard<std::mutex> lk(ks::g_alloc_mu);
    Alloc* A = ks::find_alloc_locked((uintptr_t)ptr);
    if (!A || A->base != (uintptr_t)ptr || A->freed) return cudaErrorInvalidValue;
    A->freed = true;
#ifdef KS_MODE_ASAN
    free((void*)A->base);
#else
    madvise((void*)A->map_lo, A->map_len, MADV_DONTNEED);
    mprotect((void*)A->map_lo, A->map_len, PROT_NONE);
    munmap(A->cells, A->ncells * sizeof(ks::GCell));
    munmap(A->bytes, A->ncells * 4 * sizeof(ks::GCell));
    A->cells = A->bytes = nullptr;
#endif
    return cudaSuccess;
}

static cudaError_t ks_check_copy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    bool dst_dev = ks::live_range(dst, count) != nullptr;
    bool src_dev = ks::live_range(src, count) != nullptr;
    switch (kind) {
        case cudaMemcpyHostToDevice: return dst_dev ? cudaSuccess : cudaErrorInvalidValue;
        case cudaMemcpyDeviceToHost: return src_dev ? cudaSuccess : cudaErrorInvalidValue;
        case cudaMemcpyDeviceToDevice: return (dst_dev && src_dev) ? cudaSuccess : cudaErrorInvalidValue;
        case cudaMemcpyHostToHost: return cudaSuccess;
        case cudaMemcpyDefault: {
            // a pointer that looks like device memory but is not inside a live buffer is an error
            uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
            if (ks::g_heap_span && ((d - ks::g_heap_lo < ks::g_heap_span && !dst_dev) ||
                                    (s - ks::g_heap_lo < ks::g_heap_span && !src_dev)))
                return cudaErrorInvalidValue;
            return cudaSuccess;
        }
    }
    return cudaErrorInvalidMemcpyDirection;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind kind) {
    if (count == 0) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lk(ks::g_alloc_mu);
        cudaError_t e = ks_check_copy(dst, src, count, kind);
        if (e != cudaSuccess) return e;
    }
    memmove(dst, src, count);
    return cudaSuccess;
}

cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                         cudaMemcpyKind kind) {
    if (width > dpitch || width > spitch) return cudaErrorInvalidValue;
    for (size_t r = 0; r < height; ++r) {
        cudaError_t e = cudaMemcpy((char*)dst + r * dpitch, (const char*)src + r * spitch, width, kind);
        if (e != cudaSuccess) return e;
    }
    return cudaSuccess;
}

cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
    *pitch = ks::round_up(width ? width : 1, 512);
    return cudaMalloc(ptr, *pitch * height);
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
    if (count == 0) return cudaSuccess;
    {
        std::lock_guard<std::mutex> lk(ks::g_alloc_mu);
        if (!ks::live_range(ptr, count)) return cudaErrorInvalidValue;
    }
    memset(ptr, value, count);
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }
cudaError_t cudaDeviceReset() { return cudaSuccess; }
cudaError_t cudaGetLastError() { return cudaSuccess; }
cudaError_t cudaPeekAtLastError() { return cudaSuccess; }

const char* cudaGetErrorName(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "cudaSuccess";
        case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
        case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
        case cudaErrorInitializationError: return "cudaErrorInitializationError";
        case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
        case cudaErrorInvalidSymbol: return "cudaErrorInvalidSymbol";
        case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
        case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
        case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
        case cudaErrorNoDevice: return "cudaErrorNoDevice";
        case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
        case cudaErrorNotReady: return "cudaErrorNotReady";
        case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
        case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
        case cudaErrorNotSupported: return "cudaErrorNotSupported";
        default: return "cudaErrorUnknown";
    }
}

const char* cudaGetErrorString(cudaError_t e) {
    switch (e) {
        case cudaSuccess: return "no error";
        case cudaErrorInvalidValue: return "invalid argument";
        case cudaErrorMemoryAllocation: return "out of memory";
        case cudaErrorInvalidConfiguration: return "invalid configuration argument";
        case cudaErrorInvalidDevicePointer: return "invalid device pointer";
        case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
        case cudaErrorInvalidDevice: return "invalid device ordinal";
        case cudaErrorNotSupported: return "operation not supported";
        default: return cudaGetErrorName(e);
    }
}

cudaError_t cudaGetDeviceCount(int* n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int* d) {
    *d = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int d) { return d == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
    if (d != 0) return cudaErrorInvalidDevice;
    memset(p, 0, sizeof(*p));
    snprintf(p->name, sizeof(p->name), "kernel-skills CPU executor (emulating sm_90)");
    p->totalGlobalMem = 80ull << 30;
    p->sharedMemPerBlock = ks::kSmemDefault;
    p->regsPerBlock = 65536;
    p->warpSize = 32;
    p->memPitch = 1ull << 31;
    p->maxThreadsPerBlock = 1024;
    p->maxThreadsDim[0] = 1024;
    p->maxThreadsDim[1] = 1024;
    p->maxThreadsDim[2] = 64;
    p->maxGridSize[0] = 2147483647;
    p->maxGridSize[1] = 65535;
    p->maxGridSize[2] = 65535;
    p->clockRate = 1980000;
    p->totalConstMem = 65536;
    p->major = 9;
    p->minor = 0;
    p->textureAlignment = 512;
    p->multiProcessorCount = 132;
    p->concurrentKernels = 1;
    p->unifiedAddressing = 1;
    p->memoryClockRate = 2619000;
    p->memoryBusWidth = 5120;
    p->l2CacheSize = 50 * 1024 * 1024;
    p->maxThreadsPerMultiProcessor = 2048;
    p->sharedMemPerMultiprocessor = 228 * 1024;
    p->regsPerMultiprocessor = 65536;
    p->sharedMemPerBlockOptin = ks::kSmemLimit;
    p->maxBlocksPerMultiProcessor = 32;
    p->reservedSharedMemPerBlock = 1024;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int d) {
    if (d != 0) return cudaErrorInvalidDevice;
    switch (a) {
        case cudaDevAttrMaxThreadsPerBlock: *v = 1024; break;
        case cudaDevAttrMaxBlockDimX: *v = 1024; break;
        case cudaDevAttrMaxBlockDimY: *v = 1024; break;
        case cudaDevAttrMaxBlockDimZ: *v = 64; break;
        case cudaDevAttrMaxGridDimX: *v = 2147483647; break;
        case cudaDevAttrMaxGridDimY: *v = 65535; break;
        case cudaDevAttrMaxGridDimZ: *v = 65535; break;
        case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)ks::kSmemDefault; break;
        case cudaDevAttrTotalConstantMemory: *v = 65536; break;
        case cudaDevAttrWarpSize: *v = 32; break;
        case cudaDevAttrMaxPitch: *v = 2147483647; break;
        case cudaDevAttrMaxRegistersPerBlock: *v = 65536; break;
        case cudaDevAttrClockRate: *v = 1980000; break;
        case cudaDevAttrMultiProcessorCount: *v = 132; break;
        case cudaDevAttrMemoryClockRate: *v = 2619000; break;
        case cudaDevAttrGlobalMemoryBusWidth: *v = 5120; break;
        case cudaDevAttrL2CacheSize: *v = 50 * 1024 * 1024; break;
        case cudaDevAttrMaxThreadsPerMultiProcessor: *v = 2048; break;
        case cudaDevAttrComputeCapabilityMajor: *v = 9; break;
        case cudaDevAttrComputeCapabilityMinor: *v = 0; break;
        case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *v = 228 * 1024; break;
        case cudaDevAttrMaxRegistersPerMultiprocessor: *v = 65536; break;
        case cudaDevAttrCooperativeLaunch: *v = 0; break;
        case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)ks::kSmemLimit; break;
        case cudaDevAttrMaxBlocksPerMultiprocessor: *v = 32; break;
        default: return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
    *total_bytes = 80ull << 30;
    *free_bytes = 79ull << 30;
    return cudaSuccess;
}

struct CUstream_st {
    int dummy;
};
struct CUevent_st {
    std::chrono::steady_clock::time_point t;
};

cudaError_t cudaStreamCreate(cudaStream_t* s) {
    *s = new CUstream_st{0};
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned) { return cudaStreamCreate(s); }
cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if ((uintptr_t)s > 2) delete s;
    return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* e) {
    *e = new CUevent_st{std::chrono::steady_clock::now()};
    return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    if (!e) return cudaErrorInvalidResourceHandle;
    e->t = std::chrono::steady_clock::now();
    return cudaSuccess;
}
cudaError_t cudaEventSynchronize(cudaEvent_t e) { return e ? cudaSuccess : cudaErrorInvalidResourceHandle; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t a, cudaEvent_t b) {
    if (!a || !b) return cudaErrorInvalidResourceHandle;
    *ms = std::chrono::duration<float, std::milli>(b->t - a->t).count();
    return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}
