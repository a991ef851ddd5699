"""Issue #33, info: a replica's ``--metrics-port`` has no authentication, so it listens on
this host only unless told otherwise, and says so when it is told otherwise.

Real ``runworker`` processes; where a socket listens is read from the kernel's own table
(``/proc/net/tcp``), not from what the replica logs.
"""

from __future__ import annotations

import socket
import sys
import urllib.request
from pathlib import Path

import pytest

from django_jobs.metrics import loopback

from .concurrency import wait_until

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/net/tcp")

LISTEN = "0A"


def listening_on(port: int) -> set[str]:
    """The IPv4 addresses a socket listens on at ``port``, from the kernel's table."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        address, hex_port = fields[1].split(":")
        if fields[3] == LISTEN and int(hex_port, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


def served_port(replica) -> int:
    wait_until(
        lambda: replica.logged("metrics.serving") == 1,
        timeout=60,
        what=lambda: f"the metrics port to open: {replica.log_path.read_text()[-2000:]}",
    )
    (event,) = [e for e in replica.events() if e.get("event") == "metrics.serving"]
    return int(event["port"])


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


@linux
@pytest.mark.django_db(transaction=True)
def test_the_metrics_port_listens_on_loopback_only_by_default(start) -> None:
    replica = start("metrics-default", args=["--metrics-port", "0"])
    port = served_port(replica)

    assert listening_on(port) == {"127.0.0.1"}
    assert "django_jobs_scrape_error 0.0" in scrape(port)
    assert replica.logged("metrics.unauthenticated") == 0
    replica.stop()
    assert replica.process.returncode == 0


@linux
@pytest.mark.django_db(transaction=True)
def test_every_interface_is_bound_only_when_asked_and_logged_as_unauthenticated(start) -> None:
    replica = start("metrics-wide", args=["--metrics-port", "0", "--metrics-addr", "0.0.0.0"])
    port = served_port(replica)

    assert listening_on(port) == {"0.0.0.0"}
    wait_until(
        lambda: replica.logged("metrics.unauthenticated") == 1,
        timeout=30,
        what="the warning that the port has no authentication",
    )
    (warning,) = [e for e in replica.events() if e.get("event") == "metrics.unauthenticated"]
    assert (warning["addr"], warning["port"], warning["level"]) == ("0.0.0.0", port, "warning")
    replica.stop()


@pytest.mark.parametrize(
    ("addr", "expected"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.5", False),
        ("metrics.internal", False),
    ],
)
def test_what_counts_as_this_host_only(addr, expected) -> None:
    assert loopback(addr) is expected
