"""A CPython heap for bench/cpython_pause_bench.py: N dicts, each holding a
string and a list (about 7 blocks each under PYTHONMALLOC=malloc). With
"busy", two threads keep replacing dicts and reading every eighth object,
which writes the reference count of everything they touch."""

import random
import sys
import threading
import time

N = int(sys.argv[1])
objs = [{"k": i, "s": str(i) * 3, "l": [i, i + 1]} for i in range(N)]


def churn(seed: int) -> None:
    r = random.Random(seed)
    while True:
        for _ in range(1000):
            i = r.randrange(N)
            objs[i] = {"k": i, "s": str(r.random()), "l": [i, objs[r.randrange(N)]["k"]]}
        total = 0
        for o in objs[r.randrange(8) :: 8]:
            total += o["k"]


if sys.argv[2:] == ["busy"]:
    for seed in (1, 2):
        threading.Thread(target=churn, args=(seed,), daemon=True).start()
print("READY", flush=True)
while True:
    time.sleep(1)
