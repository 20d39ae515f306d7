import numpy as np


def run(a, B):
    return np.bincount(a, minlength=B).astype(np.int32)
