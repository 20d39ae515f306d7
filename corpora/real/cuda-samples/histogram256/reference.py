import numpy as np


def run(data):
    return np.bincount(data.astype('<u4').view(np.uint8), minlength=256).astype(np.uint32)
