"""Nodes that stop instead of waiting forever: a watch over Paddle's launcher while the nodes of a job meet.

Paddle's launcher (3.3.1, ``launch/controllers/master.py``, ``HTTPMaster.sync_peers``) puts this node's entry in
the key-value store the master's launcher serves over HTTP and reads the store back every half second until all
N nodes have theirs, with no time limit and nothing said; only then does it start this node's workers. So the
first worker of this node to start (it creates the file ``STARTED_VARIABLE`` names, ``worker.py``) shows that every
node has joined. ``watch`` waits for that, for the launcher's end, or for ``--rendezvous-timeout``: then it reads
the store once to say which nodes never came, kills the launcher's process group (the launcher and the store it
may serve; no worker has started) and raises one UserError.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Optional

from ernie_ft.errors import UserError
from ernie_ft.training.worker import STARTED_VARIABLE

PEER_KEY = re.compile(r"^/[^/]+/info/[^/]+/-?\d+$")
"""A node's entry in the launcher's store: /JOB_ID/info/POD_NAME/RANK (RANK -1 without --rank)."""
POLL_SECONDS = 1.0
"""How often the watch looks for the marker while the launcher runs (the launcher's own poll is 0.5 s)."""


@dataclass
class Rendezvous:
    """Where this node meets the others, and for how long it waits."""

    master: str
    """HOST:PORT as the user gave it (``--master``)."""
    endpoint: str
    """The address the launcher is given and the store answers on (the host resolved, ``launch.master_endpoint``)."""
    nodes: int
    node_rank: Optional[int]
    timeout: float
    marker: str
    """The file this node's first worker creates: every node has joined."""

    @classmethod
    def start(cls, parallel, endpoint: str) -> Optional[Rendezvous]:
        """The rendezvous of a ``--nnodes N --master`` job (N > 1), its marker in a fresh temporary directory; None
        for one node or ``--ips`` (no master to wait at). ``close`` removes the directory."""
        if parallel.nodes < 2 or not parallel.master:
            return None
        marker = os.path.join(tempfile.mkdtemp(prefix="ernie_ft-rendezvous-"), "started")
        return cls(parallel.master, endpoint, parallel.nodes, parallel.node_rank, parallel.rendezvous_timeout, marker)

    def env(self) -> dict:
        """What the launcher's environment carries to the workers."""
        return {STARTED_VARIABLE: self.marker}

    def close(self) -> None:
        shutil.rmtree(os.path.dirname(self.marker), ignore_errors=True)


def watch(process: subprocess.Popen, rendezvous: Rendezvous) -> Optional[int]:
    """Wait until every node has joined (None: the job runs) or the launcher has ended (its exit status). After
    ``rendezvous.timeout`` seconds without both, unless the store shows every node in (the workers are starting),
    kill the launcher's process group and raise UserError naming the master and the nodes that never came."""
    deadline = time.monotonic() + rendezvous.timeout
    while not os.path.exists(rendezvous.marker):
        left = deadline - time.monotonic()
        if left <= 0:
            peers = joined_peers(rendezvous.endpoint)
            if peers is not None and len(peers) >= rendezvous.nodes:
                return None
            stop_group(process)
            raise UserError(never_joined(rendezvous, peers))
        try:
            return process.wait(timeout=min(POLL_SECONDS, left))
        except subprocess.TimeoutExpired:
            pass
    return None


def stop_group(process: subprocess.Popen) -> None:
    """SIGKILL the process group ``process`` leads (started with ``start_new_session``) and reap it."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()


def joined_peers(endpoint: str) -> Optional[list[dict]]:
    """The entries of the nodes that have joined, as the master's store holds them (``{"rank": K or -1,
    "candidate": "IP:PORT", ...}``); None when the master does not answer. Proxies are bypassed: the master is a
    node of the job."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(f"http://{endpoint}/", timeout=5) as answer:
            store = json.loads(answer.read().decode("utf-8"))
    except urllib.error.HTTPError:
        return []  # it answers, with nothing stored
    except (OSError, ValueError):
        return None
    peers = []
    for key, value in store.items():
        try:
            entry = json.loads(value) if PEER_KEY.match(key) else None
        except ValueError:
            entry = None
        if isinstance(entry, dict):
            peers.append(entry)
    return peers


def never_joined(rendezvous: Rendezvous, peers: Optional[list[dict]]) -> str:
    """The error of a node that waited in vain: where, for which nodes, who came, what to do."""
    r = rendezvous
    where = r.master if r.endpoint == r.master else f"{r.master} ({r.endpoint})"
    advice = (
        f"start the same command (--nnodes {r.nodes} --master {r.master}) on every node, or give them longer "
        f"with --rendezvous-timeout SECONDS"
    )
    if peers is None:
        host = r.endpoint.rpartition(":")[0]
        return (
            f"--rendezvous-timeout {r.timeout:g}: waited {r.timeout:g} s for the master {where}, which never "
            f"answered: the launcher of the node at {host} serves it once that node runs the command; {advice}"
        )
    ranks = sorted(int(p.get("rank", -1)) for p in peers)
    addresses = ", ".join(sorted(str(p.get("candidate", "?")).rpartition(":")[0] for p in peers))
    if r.node_rank is not None and peers and all(k >= 0 for k in ranks):
        missing = [k for k in range(r.nodes) if k not in ranks]
        waited_for = f"node{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} of {r.nodes}"
        came = f"node{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))} joined, from {addresses}"
    else:
        waited_for = f"{r.nodes - len(peers)} of {r.nodes} nodes"
        came = f"{len(peers)} joined, from {addresses}" if peers else "none joined"
    waited = f"--rendezvous-timeout {r.timeout:g}: waited {r.timeout:g} s at the master {where}"
    return f"{waited} for {waited_for} ({came}); {advice}"
