import numpy as np


def run(input, residual, weight, epsilon):
    # h is stored as half (the kernel writes it back to residual); the statistics use that half value
    h = (input.astype(np.float32) + residual.astype(np.float32)).astype(np.float16)
    hf = h.astype(np.float64)
    inv = 1.0 / np.sqrt((hf * hf).mean(axis=-1, keepdims=True) + epsilon)
    scaled = (hf * inv).astype(np.float16)  # the kernel rounds x * inv to half before the weight
    out = (scaled.astype(np.float32) * weight.astype(np.float32)).astype(np.float16)
    return out, h
