"""Settings for the whole test session.

One torch thread: the tests train tiny models, for which a second intra-op thread costs more in
synchronisation than it saves, and on a busy 2-core machine (CI, or developers sharing one) a
parallel op waits for its descheduled partner thread (tens of milliseconds per op). Tests that
are about thread counts set them themselves. The processes tests start (subprocesses, workers)
get one thread too, unless the environment already says how many.
"""

import os

import torch

torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")
