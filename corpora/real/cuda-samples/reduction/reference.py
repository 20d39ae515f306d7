import numpy as np


def run(a):
    return np.array([a.astype(np.float64).sum()], dtype=np.float32)
