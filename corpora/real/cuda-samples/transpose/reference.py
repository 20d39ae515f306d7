import numpy as np


def run(idata):
    return np.ascontiguousarray(idata.T)
