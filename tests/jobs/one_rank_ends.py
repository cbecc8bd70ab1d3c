"""Two plain-Python ranks (no torch) under `mldebug run`: rank 0 ends with exit code 0 at
once, rank 1 works on (a loop of short sleeps) until it is stopped. What a job looks like
whose ranks end one by one."""

import os
import time

rank = int(os.environ["RANK"])
print("READY", flush=True)
if rank != 0:
    end = time.monotonic() + float(os.environ.get("WORK_S", "300"))
    while time.monotonic() < end:
        time.sleep(0.05)
