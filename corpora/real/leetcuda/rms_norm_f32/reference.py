import numpy as np


def run(x, g):
    z = x.astype(np.float64)
    ms = (z * z).mean(axis=1, keepdims=True)
    return (z / np.sqrt(ms + 1e-5) * g).astype(np.float32)
