"""Run by ComfyUI before it imports torch (custom nodes' prestartup scripts): OpenMP reads its settings
once, when torch loads it, so this is the only place a node pack can choose them.

OMP_WAIT_POLICY=PASSIVE (where the user has not set it): OpenMP's threads sleep when a parallel region
ends instead of spinning for it. The defaults spin, and with other processes busy (a ComfyUI server is
rarely alone) each of torch's small CPU ops, and the torch set-up around numba's loops, waited for
spinning threads the system had descheduled: the pack's CPU engines took 10-30x their quiet time
(bench/bench_threads.py). Nothing else is imported here.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
