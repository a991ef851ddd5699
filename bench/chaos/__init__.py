"""The fault campaign: replicas of ``runworker`` under random, replayable faults.

``python -m bench.chaos --minutes 30 --seed 1`` starts PostgreSQL (embedded, or the server in
``DATABASE_URL``), several workers with a mix of schedules, injects faults chosen by a seeded
random generator, then checks from the database alone that nothing was done twice or lost.
See docs/reliability.md.
"""
