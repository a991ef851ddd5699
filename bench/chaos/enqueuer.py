"""The campaign's application code: a process that enqueues work the way a web process would,
one transaction per piece of work, through every fault the campaign injects.

Each piece of work has a key, so a client that does not know whether its commit landed (the
store went away mid-commit) enqueues the same key again: nothing new is written if it had.
Every committed identity is appended to the output file, which the invariants read (each must
complete exactly once). Every piece is then enqueued once more under its key, as a client
retrying after a timeout would: that must write nothing and name the same occurrence.

``python -m bench.chaos.enqueuer OUT STOP [EVERY]``: runs until the file STOP exists.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path


def main(out: Path, stop: Path, every: float) -> int:
    import django

    django.setup()
    from django.db import DatabaseError, connection, transaction

    from django_jobs import enqueue

    n, failures = 0, 0
    with out.open("a") as committed:
        while not stop.exists():
            key = f"enqueued-{n:06d}"
            try:
                with transaction.atomic():
                    done = enqueue("chaos.effect", key=key, args={"n": n})
                again = enqueue("chaos.effect", key=key, args={"n": -1})
            except DatabaseError as exc:  # the store is out of reach: retry the same key
                failures += 1
                print(f"enqueue {key}: {type(exc).__name__}; retrying", flush=True)
                connection.close()
                time.sleep(0.5)
                continue
            if again.id != done.id or again.created:
                print(f"enqueue {key}: a second enqueue wrote {again}", flush=True)
                return 1
            committed.write(f"{done.id}\n")
            committed.flush()
            n += 1
            time.sleep(every)
    print(f"enqueued {n} pieces of work ({failures} attempts met an outage)", flush=True)
    return 0


if __name__ == "__main__":
    every = float(sys.argv[3]) if len(sys.argv) > 3 else 0.2
    raise SystemExit(main(Path(sys.argv[1]), Path(sys.argv[2]), every))
