#!/usr/bin/env python3
"""Run a command and report how busy the rest of the machine was meanwhile.

python3 noise.py CMD ARGS...   -> CMD's output, then a line
  NOISE wall=S own_cpu=S machine_busy_cores=X others_cores=Y ncpu=N
others_cores = (machine non-idle CPU time - CPU time of CMD and its descendants) / wall,
i.e. how many cores other processes used on average while CMD ran (0 = quiet).
"""
import os
import resource
import subprocess
import sys
import time


def stat():
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    idle = v[3] + v[4]  # idle + iowait
    return sum(v[:8]), idle


def main():
    hz = os.sysconf("SC_CLK_TCK")
    t0, i0 = stat()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    w0 = time.time()
    rc = subprocess.call(sys.argv[1:])
    wall = time.time() - w0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t1, i1 = stat()
    busy = ((t1 - t0) - (i1 - i0)) / hz
    own = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(f"NOISE wall={wall:.1f} own_cpu={own:.1f} machine_busy_cores={busy / wall:.2f} "
          f"others_cores={max(0.0, busy - own) / wall:.2f} ncpu={os.cpu_count()}", flush=True)
    sys.exit(rc)


if __name__ == "__main__":
    main()
