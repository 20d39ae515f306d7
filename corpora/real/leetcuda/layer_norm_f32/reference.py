import numpy as np


def run(x, g, b):
    z = x.astype(np.float64)
    mean = z.mean(axis=1, keepdims=True)
    var = ((z - mean) ** 2).mean(axis=1, keepdims=True)
    return ((z - mean) / np.sqrt(var + 1e-5) * g + b).astype(np.float32)
