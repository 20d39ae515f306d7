// kernel-skills prelude (project code): the one ATen device helper apex's kernel calls,
// WARP_SHFL(value, srcLane, width = 32, mask = all lanes) from ATen/cuda/DeviceUtils.cuh, written
// here as the plain __shfl_sync it stands for.
template <typename T>
__device__ __forceinline__ T WARP_SHFL(T value, int srcLane, int width = 32, unsigned int mask = 0xffffffff) {
    return __shfl_sync(mask, value, srcLane, width);
}
