// ks_harness.h: the gate's harness runtime, shared by the cuda executor (nvcc) and the cpu
// executor (g++ with ks_cpu.h). It only uses the CUDA runtime API, so one source serves both.
//
// Protocol: argv[1] is a manifest written by mining/gate/harness.py:
//   mode check|profile, warmup W, repeats R, flush_bytes B, then per case:
//   case K / axis NAME VALUE / scalar NAME VALUE / in NAME BYTES PATH / out NAME BYTES PATH / end
// Results go to stdout, one line each: "case K ok", "case K times_ms t1 t2 ...", "device NAME SMS".
// A CUDA error prints "KS_ERROR cuda <message>" to stderr and exits 87.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <string>
#include <vector>
#include <map>
#include <fstream>
#include <sstream>
#include <functional>

namespace ks_harness {

inline void fail_cuda(cudaError_t e, const char* what) {
    std::fprintf(stderr, "KS_ERROR cuda %s: %s\n", what, cudaGetErrorString(e));
    std::fflush(stderr);
    std::exit(87);
}

inline void check(cudaError_t e, const char* what) {
    if (e != cudaSuccess) fail_cuda(e, what);
}

// Guard regions: KS_GUARD_BYTES (rounded up to 256, so buffers keep cudaMalloc's alignment) of
// poison before and after every device buffer, checked after each correctness run: a kernel that
// writes past either end of a buffer fails even where the hardware does not fault (a write one
// element past a cudaMalloc buffer lands in the allocator's slack). Off (0) where a checker sees
// the true bounds: the CPU executor's checked run and compute-sanitizer.
constexpr unsigned char kGuardByte = 0xA5;

inline size_t guard_bytes() {
    static const size_t g = [] {
        const char* v = std::getenv("KS_GUARD_BYTES");
        long long n = v ? std::atoll(v) : 0;
        return n > 0 ? (size_t)((n + 255) / 256 * 256) : (size_t)0;
    }();
    return g;
}

struct Buffer {
    std::string path;
    size_t bytes = 0;
    void* dev = nullptr;
    void* raw = nullptr;  // the allocation: guard, buffer, guard

    void* alloc() {
        size_t g = guard_bytes();
        check(cudaMalloc(&raw, bytes + 2 * g ? bytes + 2 * g : 1), "cudaMalloc");
        if (g) {
            check(cudaMemset(raw, kGuardByte, g), "cudaMemset guard");
            check(cudaMemset((char*)raw + g + bytes, kGuardByte, g), "cudaMemset guard");
        }
        dev = (char*)raw + g;
        return dev;
    }
    // "" when both guards are intact, else what was overwritten.
    std::string guard_damage() const {
        size_t g = guard_bytes();
        if (!g || !raw) return "";
        std::vector<unsigned char> host(g);
        const char* side[2] = {"before the start", "after the end"};
        for (int s = 0; s < 2; ++s) {
            const char* at = s == 0 ? (const char*)raw : (const char*)raw + g + bytes;
            check(cudaMemcpy(host.data(), at, g, cudaMemcpyDeviceToHost), "cudaMemcpy guard");
            size_t first = g, last = 0, n = 0;
            for (size_t i = 0; i < g; ++i)
                if (host[i] != kGuardByte) { first = first < i ? first : i; last = i; ++n; }
            if (n) {
                // distance from the buffer's edge, in bytes
                size_t near = s == 0 ? g - last : first + 1, far = s == 0 ? g - first : last + 1;
                char msg[256];
                std::snprintf(msg, sizeof msg, "%zu guard bytes %s changed (%zu to %zu bytes %s; buffer of %zu bytes)",
                              n, side[s], near, far, s == 0 ? "before it" : "past it", bytes);
                return msg;
            }
        }
        return "";
    }
};

struct Case {
    int id = -1;
    std::map<std::string, long long> axes;
    std::map<std::string, double> scalars;
    std::map<std::string, Buffer> ins, outs;

    template <class T> T axis(const char* name) const { return (T)axes.at(name); }
    template <class T> T scalar(const char* name) const { return (T)scalars.at(name); }

    void* load(Buffer& b) {
        std::vector<char> host(b.bytes);
        std::ifstream f(b.path, std::ios::binary);
        if (!f.read(host.data(), (std::streamsize)b.bytes)) {
            std::fprintf(stderr, "KS_ERROR harness cannot read %s\n", b.path.c_str());
            std::exit(88);
        }
        b.alloc();
        check(cudaMemcpy(b.dev, host.data(), b.bytes, cudaMemcpyHostToDevice), "cudaMemcpy H2D");
        return b.dev;
    }
    template <class T> T* input(const char* name) { return (T*)load(ins.at(name)); }
    template <class T> T* output(const char* name) { return (T*)outs.at(name).alloc(); }
    // Fails the case (exit 91) when the entry wrote into a guard region of any buffer.
    void check_guards() const {
        for (const auto* m : {&ins, &outs})
            for (const auto& kv : *m) {
                std::string damage = kv.second.guard_damage();
                if (!damage.empty()) {
                    std::fprintf(stderr, "KS_ERROR guard %s '%s': %s: the kernel wrote outside the buffer\n",
                                 m == &ins ? "input" : "output", kv.first.c_str(), damage.c_str());
                    std::fflush(stderr);
                    std::exit(91);
                }
            }
    }
    // Outputs are poisoned (all bits set: NaN for floats, -1 for ints) so unwritten elements show.
    void poison_outputs() {
        for (auto& kv : outs) check(cudaMemset(kv.second.dev, 0xFF, kv.second.bytes), "cudaMemset poison");
    }
    void write_outputs() {
        for (auto& kv : outs) {
            std::vector<char> host(kv.second.bytes);
            check(cudaMemcpy(host.data(), kv.second.dev, kv.second.bytes, cudaMemcpyDeviceToHost), "cudaMemcpy D2H");
            std::ofstream f(kv.second.path, std::ios::binary);
            f.write(host.data(), (std::streamsize)kv.second.bytes);
        }
    }
    void release() {
        for (auto* m : {&ins, &outs})
            for (auto& kv : *m) {
                if (kv.second.raw) cudaFree(kv.second.raw);
                kv.second.dev = kv.second.raw = nullptr;
            }
    }
};

struct Manifest {
    std::string mode = "check";
    int warmup = 3, repeats = 20;
    size_t flush_bytes = 0;
    std::ifstream in;
    explicit Manifest(const char* path) : in(path) {
        if (!in) { std::fprintf(stderr, "KS_ERROR harness cannot open manifest %s\n", path); std::exit(88); }
        std::string key;
        // header lines until the first "case"
        while (in >> key) {
            if (key == "mode") in >> mode;
            else if (key == "warmup") in >> warmup;
            else if (key == "repeats") in >> repeats;
            else if (key == "flush_bytes") in >> flush_bytes;
            else if (key == "begin") break;
        }
    }
    bool next(Case& c) {
        c = Case();
        std::string key;
        while (in >> key) {
            if (key == "case") in >> c.id;
            else if (key == "axis") { std::string n; long long v; in >> n >> v; c.axes[n] = v; }
            else if (key == "scalar") { std::string n; double v; in >> n >> v; c.scalars[n] = v; }
            else if (key == "in" || key == "out") {
                Buffer b; std::string n; in >> n >> b.bytes >> b.path;
                (key == "in" ? c.ins : c.outs)[n] = b;
            } else if (key == "end") return true;
        }
        return false;
    }
};

inline void sync_and_check(const char* what) {
    check(cudaGetLastError(), what);
    check(cudaDeviceSynchronize(), what);
}

// Runs one case: a correctness run always; in profile mode also warm-up and timed repeats with
// an L2 flush (a memset larger than L2) before each timed call.
inline void run_case(const Manifest& m, Case& c, const std::function<void()>& call) {
    c.poison_outputs();
    sync_and_check("before entry");
    call();
    sync_and_check("entry");
    c.check_guards();
    c.write_outputs();
    std::printf("case %d ok\n", c.id);
    std::fflush(stdout);
#ifndef KS_CPU_EXECUTOR
    if (m.mode == "profile") {
        void* flush = nullptr;
        if (m.flush_bytes) check(cudaMalloc(&flush, m.flush_bytes), "cudaMalloc flush");
        for (int i = 0; i < m.warmup; ++i) call();
        sync_and_check("warm-up");
        cudaEvent_t start, stop;
        check(cudaEventCreate(&start), "cudaEventCreate");
        check(cudaEventCreate(&stop), "cudaEventCreate");
        std::printf("case %d times_ms", c.id);
        for (int r = 0; r < m.repeats; ++r) {
            if (flush) check(cudaMemsetAsync(flush, r & 0xFF, m.flush_bytes), "flush");
            check(cudaEventRecord(start), "cudaEventRecord");
            call();
            check(cudaEventRecord(stop), "cudaEventRecord");
            check(cudaEventSynchronize(stop), "cudaEventSynchronize");
            float ms = 0.f;
            check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
            std::printf(" %.6f", ms);
        }
        std::printf("\n");
        std::fflush(stdout);
        check(cudaGetLastError(), "profile");
        cudaEventDestroy(start);
        cudaEventDestroy(stop);
        if (flush) cudaFree(flush);
    }
#else
    (void)m;
#endif
    c.release();
}

inline void print_device() {
#ifndef KS_CPU_EXECUTOR
    cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
        std::printf("device_name %s\n", prop.name);
        std::printf("device_sms %d\n", prop.multiProcessorCount);
        std::printf("device_cc %d.%d\n", prop.major, prop.minor);
        std::printf("device_l2_bytes %d\n", prop.l2CacheSize);
    }
#endif
}

}  // namespace ks_harness
