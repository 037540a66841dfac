"""Suite-wide setup: without a GPU, Triton kernels run in Triton's CPU interpreter.

TRITON_INTERPRET must be set before a kernel module is imported (gdn imports its kernels lazily, on
the first backend="triton" call), so it is set here, at collection time.
"""
import os

# Under pytest-xdist each worker gets one thread for torch and BLAS: the workers already fill the
# cores, and two threads each on the CI machine's two cores only contend (the suite's bulk, Triton's
# interpreter, is single-threaded numpy). Set before torch and numpy load their thread pools.
XDIST_WORKER = bool(os.environ.get("PYTEST_XDIST_WORKER"))
if XDIST_WORKER:
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, "1")

import torch  # noqa: E402

if XDIST_WORKER:
    torch.set_num_threads(1)

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
