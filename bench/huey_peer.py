#!/usr/bin/env python3
"""The huey (SqliteHuey, fsync on) peer for bench/run.sh.

  huey_peer.py enqueue DB N               enqueue N no-op tasks, one commit each; prints seconds
  huey_peer.py drain DB N [WORKERS]       run a thread consumer until N tasks completed; prints seconds
  huey_peer.py consumer DB                run a thread consumer (4 workers, default polling) until SIGTERM
  huey_peer.py pickup DB COUNT GAP_MS OUT enqueue COUNT probe tasks GAP_MS apart; each records
                                          start - enqueue time (ms) as one line in OUT

Every phase is bounded: drain and pickup give up after 300 s / 60 s.
"""
import os
import signal
import sys
import threading
import time

from huey import SqliteHuey
from huey.constants import WORKER_THREAD
from huey.signals import SIGNAL_COMPLETE, SIGNAL_ERROR

DB = sys.argv[2] if len(sys.argv) > 2 else "huey.db"
huey = SqliteHuey(name="bench", filename=DB, fsync=True)


@huey.task()
def noop():
    return None


@huey.task()
def pickup(enqueued_at, out):
    started = time.time()
    with open(out, "a") as f:
        f.write(f"{(started - enqueued_at) * 1000.0:.1f}\n")


def enqueue(n):
    t0 = time.perf_counter()
    for _ in range(n):
        noop()
    print(f"{time.perf_counter() - t0:.6f}")


def drain(n, workers):
    done = {"ok": 0, "error": 0}
    lock = threading.Lock()
    finished = threading.Event()

    @huey.signal(SIGNAL_COMPLETE, SIGNAL_ERROR)
    def on_end(sig, task, *args, **kwargs):
        with lock:
            done["ok" if sig == SIGNAL_COMPLETE else "error"] += 1
            if done["ok"] + done["error"] >= n:
                finished.set()

    consumer = huey.create_consumer(workers=workers, worker_type=WORKER_THREAD, periodic=False,
                                    check_worker_health=False)
    t0 = time.perf_counter()
    consumer.start()
    ok = finished.wait(timeout=300)
    elapsed = time.perf_counter() - t0
    consumer.stop(graceful=True)
    if not ok or done["error"]:
        print(f"huey drain incomplete: {done}", file=sys.stderr)
        sys.exit(1)
    print(f"{elapsed:.6f}")


def consumer_forever():
    consumer = huey.create_consumer(workers=4, worker_type=WORKER_THREAD, periodic=False)
    consumer.run()


def probe(count, gap_ms, out):
    open(out, "w").close()
    for _ in range(count):
        pickup(time.time(), out)
        time.sleep(gap_ms / 1000.0)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(out) as f:
            if sum(1 for _ in f) >= count:
                return
        time.sleep(0.05)
    print("huey pickup: not every probe ran within 60 s", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        sys.exit(64)
    cmd = sys.argv[1]
    if cmd == "enqueue":
        enqueue(int(sys.argv[3]))
    elif cmd == "drain":
        drain(int(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 4)
    elif cmd == "consumer":
        consumer_forever()
    elif cmd == "pickup":
        probe(int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
    else:
        print(__doc__)
        sys.exit(64)


if __name__ == "__main__":
    main()
