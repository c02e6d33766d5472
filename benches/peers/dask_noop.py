"""10,000 no-op tasks on 8 slots with Dask, the peer figure for benches/waves.rs.

Run: python3 benches/peers/dask_noop.py  (needs `pip install "dask[distributed]"`)
A local cluster of 2 worker processes x 4 threads (Flint's bench: 2 TaskManager processes x 4
slots); submit -> all results back, median of 3 after one warm-up round.
"""
import statistics
import time

from dask.distributed import Client, LocalCluster


def noop(i):
    return i


def main():
    with LocalCluster(n_workers=2, threads_per_worker=4, processes=True,
                      dashboard_address=None) as cluster, Client(cluster) as client:
        client.gather(client.map(noop, range(100), pure=False))
        times = []
        for _ in range(3):
            began = time.perf_counter()
            futures = client.map(noop, range(10_000), pure=False)
            client.gather(futures)
            times.append(time.perf_counter() - began)
        median = statistics.median(times)
        print(f"| Dask {__import__('dask').__version__}: 10,000 no-op tasks on 2 workers x 4 threads "
              f"| {median:.3f} s | {10_000 / median:.0f} tasks/s |")


if __name__ == "__main__":
    main()
