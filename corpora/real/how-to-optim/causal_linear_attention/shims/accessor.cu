// kernel-skills prelude (project code): a minimal stand-in for the torch accessor type the
// original kernel is written over (torch::PackedTensorAccessor32 with RestrictPtrTraits): a
// contiguous N-d view whose operator[] peels one dimension, as torch's does.
#include <cstddef>
#include <cstdint>
namespace torch {
template <typename T> struct RestrictPtrTraits {};

template <typename T, size_t N>
struct TensorAccessor {
    T* data;
    const int* strides;
    __host__ __device__ TensorAccessor<T, N - 1> operator[](int i) const { return {data + i * strides[0], strides + 1}; }
};
template <typename T>
struct TensorAccessor<T, 1> {
    T* data;
    const int* strides;
    __host__ __device__ T& operator[](int i) const { return data[i * strides[0]]; }
};

template <typename T, size_t N, template <typename> class PtrTraits>
struct PackedTensorAccessor32 {
    T* data;
    int strides[N];
    __host__ __device__ TensorAccessor<T, N - 1> operator[](int i) const { return {data + i * strides[0], strides + 1}; }
};
}  // namespace torch
