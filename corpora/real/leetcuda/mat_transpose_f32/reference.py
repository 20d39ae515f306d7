import numpy as np


def run(x):
    return np.ascontiguousarray(x.T)
