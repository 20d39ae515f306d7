import numpy as np


def run(q, k, v):
    # running K^T V state per (b, h): out_t = q_t (sum_{s <= t} k_s^T v_s), in float64
    B, H, L, E = q.shape
    kv = np.zeros((B, H, E, v.shape[-1]))
    out = np.empty(v.shape, dtype=np.float64)
    q64, k64, v64 = q.astype(np.float64), k.astype(np.float64), v.astype(np.float64)
    for t in range(L):
        kv += k64[:, :, t, :, None] * v64[:, :, t, None, :]
        out[:, :, t] = np.einsum("bhe,bhem->bhm", q64[:, :, t], kv)
    return out.astype(np.float32)
