"""Suite-wide setup: without a GPU, Triton kernels run in Triton's CPU interpreter.

TRITON_INTERPRET must be set before a kernel module is imported (gdn imports its kernels lazily, on
the first backend="triton" call), so it is set here, at collection time.
"""
import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
