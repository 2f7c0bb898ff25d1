"""What `ttlearn serve`'s `release_large_blocks` costs and saves: an export rendered with glibc's large-block threshold
fixed at 128 KiB (the service) against the threshold left to climb (the raw baseline), each side in fresh processes,
alternating so machine load hits both alike.

    PYTHONPATH=src python benchmarks/large_blocks.py [--mb 4] [--renders 60] [--threads 8] [--repeats 3]

Cost: the median time to render one export of --mb megabytes (FastAPI's JSONResponse, as the service does); a block in
a mapping of its own is fresh zeroed pages each time. Saving: the resident memory left after --threads live threads have
rendered one export each, one at a time (the service's request threads, which stay in its pool), with no export
alive any more. Printed: both figures for both sides and their ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path


def resident_bytes() -> int:
    """This process's resident memory now (VmRSS)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def measure(release: bool, mb: int, renders: int, threads: int) -> dict[str, float]:
    """One side, in this process: median render time, then resident memory left by renders on `threads` threads."""
    from fastapi.responses import JSONResponse

    from ttlearn.serve.limits import release_large_blocks

    if release and not release_large_blocks():
        raise SystemExit("mallopt refused: this malloc is not glibc's, so there is nothing to measure")
    data = {"items": [{"experience": str(i % 10) * 500_000, "q": 0.5} for i in range(mb * 2)]}
    JSONResponse(data)  # the first large block freed is what makes glibc's threshold climb
    times = []
    for _ in range(renders):
        start = time.perf_counter()
        body = JSONResponse(data).body
        times.append(time.perf_counter() - start)
        del body
    before = resident_bytes()
    one_at_a_time, rendered, leave = threading.Lock(), threading.Semaphore(0), threading.Event()

    def request_thread() -> None:  # a pool worker: renders one export, then stays alive with its heap
        with one_at_a_time:
            JSONResponse(data)
        rendered.release()
        leave.wait()

    workers = [threading.Thread(target=request_thread) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for _ in workers:
        rendered.acquire()
    kept = resident_bytes() - before
    leave.set()
    for worker in workers:
        worker.join()
    return {"render_ms": statistics.median(times) * 1e3, "kept_mb": kept / 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--mb", type=int, default=4, help="size of the export, in megabytes")
    parser.add_argument("--renders", type=int, default=60, help="renders timed in each process")
    parser.add_argument("--threads", type=int, default=8, help="threads that each render one export afterwards")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per side")
    parser.add_argument("--side", choices=["fixed", "climbing"], help=argparse.SUPPRESS)  # a child's one side
    args = parser.parse_args()
    if args.side:
        print(json.dumps(measure(args.side == "fixed", args.mb, args.renders, args.threads)))
        return
    sides: dict[str, list[dict[str, float]]] = {"fixed": [], "climbing": []}
    for _ in range(args.repeats):
        for side in sides:
            child = [sys.executable, __file__, "--side", side, *sys.argv[1:]]
            sides[side].append(json.loads(subprocess.run(child, check=True, capture_output=True, text=True).stdout))
    medians = {side: {k: statistics.median(r[k] for r in runs) for k in runs[0]} for side, runs in sides.items()}
    for side, m in medians.items():
        print(f"{side:>8}: render {m['render_ms']:.2f} ms · kept after {args.threads} threads {m['kept_mb']:.1f} MB")
    fixed, climbing = medians["fixed"], medians["climbing"]
    print(f"render time ratio fixed / climbing: {fixed['render_ms'] / climbing['render_ms']:.2f}")
    kept = f"{fixed['kept_mb'] / climbing['kept_mb']:.3f}" if climbing["kept_mb"] > 0 else "n/a (climbing kept none)"
    print(f"memory kept ratio fixed / climbing: {kept}")


if __name__ == "__main__":
    main()
