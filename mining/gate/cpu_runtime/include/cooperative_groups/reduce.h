// cooperative_groups/reduce.h for kernel-skills' CPU executor: cg::reduce over a warp tile
// (butterfly shuffles, every lane gets the result) and the usual operators.
#pragma once
#include "../cooperative_groups.h"

namespace cooperative_groups {

template <class T> struct plus { T operator()(const T& a, const T& b) const { return a + b; } };
template <class T> struct less { T operator()(const T& a, const T& b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(const T& a, const T& b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(const T& a, const T& b) const { return a & b; } };
template <class T> struct bit_or { T operator()(const T& a, const T& b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(const T& a, const T& b) const { return a ^ b; } };

template <unsigned N, class T, class Op>
inline T reduce(const thread_block_tile<N>& g, T v, Op op) {
    for (unsigned m = N / 2; m > 0; m /= 2) v = op(v, g.shfl_xor(v, m));
    return v;
}

}  // namespace cooperative_groups
