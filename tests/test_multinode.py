"""Several nodes: two commands on this machine joined on loopback (--nnodes 2 --master 127.0.0.1:PORT, gloo)
against one process with the same global batch; the output directory's rules; the flags refused up front."""

import fcntl
import json
import os
import socket
import sys
import time
from pathlib import Path

import numpy as np
import paddle
import pytest
from conftest import DATA, saved_weights
from helpers.nodes import Nodes, reserve_port, run_nodes, running
from helpers.rounding import ADAM_EPSILON, adam_drift

from ernie_ft.cli import task_command
from ernie_ft.config import ParallelConfig
from ernie_ft.errors import UserError
from ernie_ft.training import launch, worker
from ernie_ft.training.lock import lock_output, release_output

main = task_command("classify")

COMMON = [
    "--train",
    str(DATA / "sentiment_train.tsv"),
    "--dev",
    str(DATA / "sentiment_dev.tsv"),
    "--model",
    "scratch:tiny",
    "--epochs",
    "1",
    "--max-len",
    "48",
    "--dropout",
    "0",
    "--threads",
    "1",
    "--seed",
    "7",
    "--warmup",
    "0",
    "--eval-steps",
    "3",
    "--log-steps",
    "1",
    "--stop-after-steps",
    "6",
    "--adam-epsilon",
    str(ADAM_EPSILON),
]
# Per node: 1 process of batch 4 at --lr 1e-3, which the 2 processes of the job scale to 2e-3.
NODE = [*COMMON, "--batch-size", "4", "--lr", "1e-3", "--nnodes", "2", "--nproc", "1"]
# The weights may differ by rounding only: adam_drift(6, 2e-3) = 1.8e-5 bounds it (helpers/rounding.py). The check
# can fail: 1 process of batch 8 at the unscaled --lr 1e-3, or of batch 4 (one node's share) at 2e-3, ends more than
# 1e-3 away from the reference in 32 and 33 of the 41 tensors (measured, best/ and last/ alike).
ATOL = adam_drift(6, 2e-3)


def lines(path) -> list:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        np.testing.assert_allclose(b[name], a[name], rtol=0, atol=ATOL, err_msg=name)


def pdparams(path) -> dict:
    return {k: v.numpy() for k, v in paddle.load(str(path)).items()}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """One process, global batch 8 at lr 2e-3: 6 steps, dev every 3, the loss logged every step."""
    out = tmp_path_factory.mktemp("reference") / "run"
    assert main([*COMMON, "--output", str(out), "--batch-size", "8", "--lr", "2e-3"]) == 0
    return out


def test_two_nodes_on_loopback_train_like_one_process_with_the_same_global_batch(reference, tmp_path):
    out = tmp_path / "run"  # one output directory for both nodes: one machine, as on a shared filesystem
    nodes = [[*NODE, "--output", str(out), "--node-rank", str(k)] for k in (0, 1)]
    assert run_nodes(nodes, [out], tmp_path) == [0, 0]

    assert lines(out / "evaluations.jsonl") == lines(reference / "evaluations.jsonl")  # at steps 3 and 6
    losses = [[r["loss"] for r in lines(d / "train_log.jsonl")] for d in (reference, out)]
    assert len(losses[0]) == 6
    np.testing.assert_allclose(losses[1], losses[0], rtol=1e-4)  # the mean over both nodes' replicas
    assert_same_weights(saved_weights(reference / "best"), saved_weights(out / "best"))
    assert_same_weights(pdparams(reference / "last/model.pdparams"), pdparams(out / "last/model.pdparams"))

    rank0, rank1 = (out / "logs" / f"node-{k}" / "workerlog.0" for k in (0, 1))
    report = rank0.read_text()  # the world size comes from the launched job: both nodes' processes
    assert "2 data-parallel processes" in report and "global batch 8 = 4 per replica x 2" in report
    assert "lr 0.002 (--lr 0.001 scaled linear)" in report
    assert "global batch" not in rank1.read_text()  # only global rank 0 reports and writes


def test_the_model_is_in_the_output_directory_of_the_node_of_rank_0(tmp_path):
    """Nodes without a shared filesystem: each its own --output (here two directories); no --node-rank, so the
    node whose launcher serves the master takes rank 0 (on one machine, either)."""
    outputs = [tmp_path / "node-a", tmp_path / "node-b"]
    short = [a for a in NODE if a not in ("--dev", str(DATA / "sentiment_dev.tsv"))]
    nodes = [[*short, "--output", str(out), "--stop-after-steps", "2"] for out in outputs]
    assert run_nodes(nodes, outputs, tmp_path) == [0, 0]

    host = socket.gethostname()  # each node logs under --output/logs/HOSTNAME without --node-rank
    reported = [("global batch 8" in (out / "logs" / host / "workerlog.0").read_text()) for out in outputs]
    assert sorted(reported) == [False, True]
    main_out, other = outputs if reported[0] else outputs[::-1]
    assert (main_out / "last" / "trainer_state.json").is_file() and (main_out / "train_log.jsonl").is_file()
    assert sorted(os.listdir(other)) == ["logs"]  # the other node wrote its logs only


# --- the flags, refused before anything starts ------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags, says",
    [
        (["--nnodes", "2"], "--nnodes 2 needs --master HOST:PORT"),
        (["--master", "10.0.0.1:8090"], "--master 10.0.0.1:8090 needs --nnodes N"),
        (["--nnodes", "2", "--master", "10.0.0.1"], "--master 10.0.0.1: give HOST:PORT"),
        (["--nnodes", "2", "--master", "10.0.0.1:"], "give HOST:PORT"),
        (["--nnodes", "2", "--master", ":8090"], "give HOST:PORT"),
        (["--nnodes", "2", "--master", "10.0.0.1:http"], "give HOST:PORT"),
        (["--nnodes", "2", "--master", "10.0.0.1:70000"], "give HOST:PORT"),
        (["--nnodes", "2", "--master", "[::1]:8090"], "give HOST:PORT"),
        (["--nnodes", "2", "--master", "etcd://10.0.0.1:2379"], "give HOST:PORT"),
        (["--ips", "10.0.0.1,10.0.0.2", "--master", "10.0.0.1:8090"], "use either --ips alone or --nnodes N"),
        (["--ips", "10.0.0.1,10.0.0.2", "--nnodes", "2"], "use either --ips alone or --nnodes N"),
        (["--nnodes", "0"], "--nnodes must be at least 1"),
        (["--node-rank", "1"], "--node-rank is for jobs of several nodes"),
        (["--nnodes", "2", "--master", "10.0.0.1:8090", "--node-rank", "2"], "a node's rank is 0 to 1"),
    ],
)
def test_a_wrong_multinode_flag_is_one_error_line_and_nothing_starts(flags, says, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(launch, "run_launcher", lambda *a, **k: pytest.fail("the launcher was started"))
    out = tmp_path / "out"
    args = ["--train", str(DATA / "sentiment_train.tsv"), "--model", "scratch:tiny", "--output", str(out), *flags]
    assert main(args) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and says in err[0], err
    assert not out.exists()


def test_one_node_with_a_master_trains_on_this_node_alone(monkeypatch):
    """--nnodes 1 --master is accepted, so that one script serves any number of nodes; nothing joins a master."""
    monkeypatch.delenv("PADDLE_TRAINER_ID", raising=False)
    one = ParallelConfig(nnodes=1, master="10.0.0.1:8090")
    assert one.nodes == 1 and not launch.needs_launch(one)
    assert launch.node_flags(ParallelConfig(nnodes=1, master="10.0.0.1:8090", nproc=2)) == []


def test_needs_launch_on_several_nodes(monkeypatch):
    monkeypatch.delenv("PADDLE_TRAINER_ID", raising=False)
    monkeypatch.delenv(worker.ARGV_VARIABLE, raising=False)
    two = ParallelConfig(nnodes=2, master="10.0.0.1:8090")
    assert launch.needs_launch(two)  # one process per node still launches: the node joins the others
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")  # the paddle-operator sets it in every pod of a PaddleJob
    assert launch.needs_launch(two) and not launch.needs_launch(ParallelConfig(nproc=2))
    monkeypatch.setenv(worker.ARGV_VARIABLE, "[]")  # a process launch() started never launches again
    assert not launch.needs_launch(two)


def test_launch_joins_the_master_with_the_flags_and_not_the_environment(monkeypatch, tmp_path):
    started = {}
    monkeypatch.setattr(
        launch,
        "run_launcher",
        lambda command, env, rendezvous=None: (
            started.update(command=command, env=env, rendezvous=rendezvous) or (0, None)
        ),
    )
    for name, value in [("PADDLE_MASTER", "10.9.9.9:1"), ("PADDLE_NNODES", "5"), ("PADDLE_TRAINER_ID", "3")]:
        monkeypatch.setenv(name, value)  # as a scheduler or operator may leave them: the flags decide
    argv = [
        "classify",
        "--train",
        "t.tsv",
        "--nnodes",
        "2",
        "--master=localhost:8090",
        "--node-rank",
        "1",
        "--nproc",
        "2",
    ]
    parallel = ParallelConfig(nnodes=2, master="localhost:8090", node_rank=1, nproc=2)
    assert launch.launch(argv, parallel, str(tmp_path / "out")) == 0
    command, env = started["command"], started["env"]
    flags = command[: command.index(command[0], 1)]  # the launcher's part, before the worker's python
    assert flags[flags.index("--master") + 1] == "127.0.0.1:8090"  # resolved: the launcher compares addresses
    assert flags[flags.index("--nnodes") + 1] == "2" and flags[flags.index("--rank") + 1] == "1"
    assert flags[flags.index("--nproc_per_node") + 1] == "2"  # --nproc: processes on this node
    assert flags[flags.index("--log_dir") + 1] == str(tmp_path / "out" / "logs" / "node-1")
    assert not {"PADDLE_MASTER", "PADDLE_NNODES", "PADDLE_TRAINER_ID"} & env.keys()
    assert json.loads(env[worker.ARGV_VARIABLE]) == ["ernie_ft", "classify", "--train", "t.tsv"]
    assert env[worker.OUTPUT_VARIABLE] == str(tmp_path / "out")  # rank 0 takes the output's lock
    meet = started["rendezvous"]  # this node waits at the master 600 s by default, then stops
    assert (meet.endpoint, meet.nodes, meet.node_rank, meet.timeout) == ("127.0.0.1:8090", 2, 1, 600)
    assert env[worker.STARTED_VARIABLE] == meet.marker and not os.path.exists(os.path.dirname(meet.marker))


def test_a_running_job_in_the_output_directory_stops_a_node_before_it_starts(monkeypatch, tmp_path):
    monkeypatch.setattr(launch, "run_launcher", lambda *a, **k: pytest.fail("the launcher was started"))
    out = str(tmp_path / "out")
    parallel = ParallelConfig(nnodes=2, master="127.0.0.1:8090", node_rank=1)
    lock_output(out)  # another run: a one-node launcher, or a multi-node job's rank 0
    try:
        with pytest.raises(UserError, match="is in use by another ernie_ft run"):
            launch.launch(["classify"], parallel, out)
    finally:
        release_output(out)


def test_two_nodes_on_one_host_without_node_ranks_are_told_to_give_them(monkeypatch, tmp_path):
    monkeypatch.setattr(launch, "run_launcher", lambda *a, **k: pytest.fail("the launcher was started"))
    out = tmp_path / "out"
    logs = out / "logs" / socket.gethostname()
    logs.mkdir(parents=True)
    with open(logs / ".lock", "w") as first:  # the first node's launcher on this host, with the same --output
        fcntl.flock(first, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(UserError, match=r"give each its own --node-rank \(0 to 1\)"):
            launch.launch(["classify"], ParallelConfig(nnodes=2, master="127.0.0.1:8090"), str(out))


def test_global_rank_0_holds_the_output_lock(monkeypatch, tmp_path):
    out = str(tmp_path / "out")
    monkeypatch.setenv(worker.OUTPUT_VARIABLE, out)
    monkeypatch.setenv("PADDLE_TRAINER_ID", "1")
    worker.hold_output()  # another rank: nothing
    launch.check_output_free(out)
    monkeypatch.setenv("PADDLE_TRAINER_ID", "0")
    worker.hold_output()
    try:
        with pytest.raises(UserError, match="is in use by another ernie_ft run"):
            launch.check_output_free(out)
    finally:
        release_output(out)


def test_nodes_that_hang_are_killed_with_their_own_sessions_at_the_deadline(tmp_path):
    """The test's timeout: a command whose child runs in a session of its own (as Paddle's launcher does) is killed
    whole, and the failure shows its output."""
    console = tmp_path / "node0.txt"
    sleeper = [sys.executable, "-c", "import time; time.sleep(300)"]
    hang = f"import subprocess, time; print(subprocess.Popen({sleeper!r}, start_new_session=True).pid, flush=True); "
    nodes = Nodes([[sys.executable, "-c", hang + "time.sleep(300)"]], [console], [tmp_path])
    started = time.monotonic()
    while not console.read_text().strip():  # until the command has started its child
        assert time.monotonic() - started < 60 and nodes.procs[0].poll() is None, console.read_text()
        time.sleep(0.05)
    child = int(console.read_text())
    with pytest.raises(pytest.fail.Exception, match=f"did not finish in 1 s(.|\n)*{child}"):
        nodes.wait(timeout=1)
    assert nodes.procs[0].returncode == -9
    stat = Path(f"/proc/{child}/stat")
    assert not stat.exists() or stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"  # dead (a zombie until reaped)


# --- a node whose peers never come ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "host, rank, wait, says",
    [
        # the lone node serves the master (it is on this host) and waits there for node 0; 8 s: time for its
        # launcher to start the store and join it on a loaded machine (the message names who joined)
        ("127.0.0.1", ["--node-rank", "1"], 8, "waited 8 s at the master {master} for node 0 of 2 (node 1 joined"),
        # no node serves 127.0.0.2: this one is not at that address
        ("127.0.0.2", [], 3, "waited 3 s for the master {master}, which never answered"),
    ],
)
def test_a_node_whose_peer_never_comes_stops_at_its_rendezvous_timeout(host, rank, wait, says, tmp_path):
    out, console = tmp_path / "out", tmp_path / "node.txt"
    with reserve_port() as held:
        master = f"{host}:{held.getsockname()[1]}"
        command = [sys.executable, "-m", "ernie_ft.classify", *NODE, "--output", str(out), *rank, "--master", master]
        nodes = Nodes([[*command, "--rendezvous-timeout", str(wait)]], [console], [out])
        assert nodes.wait(timeout=240) == [2], console.read_text()  # the deadline is a guard, not a measurement
        left = running(master)  # the launcher (and the master's store it served) killed with its process group
    errors = [line for line in console.read_text().splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: --rendezvous-timeout {wait}: "), errors
    assert says.format(master=master) in errors[0] and "--nnodes 2 --master " + master in errors[0]
    assert left == []
    assert not (out / "last").exists() and not (out / "train_log.jsonl").exists()


def test_the_rendezvous_timeout_is_refused_unless_above_zero(tmp_path, capsys):
    args = ["--train", str(DATA / "sentiment_train.tsv"), "--model", "scratch:tiny", "--output", str(tmp_path / "o")]
    assert main([*args, "--rendezvous-timeout", "0"]) == 2
    assert "--rendezvous-timeout must be a number of seconds above 0" in capsys.readouterr().err


# --- nodes without a shared filesystem ----------------------------------------------------------------------------


def test_without_a_shared_filesystem_rank_1_receives_the_checkpoints_to_resume_and_test(tmp_path):
    """Each node its own --output, and only node 0's holds the run to resume (stopped after 1 step; on one process:
    the global batch is the same). Both nodes resume and score --test with best/: rank 0 reads last/ and best/, rank 1
    receives them over the process group, and the job ends where the uninterrupted run ends. Two steps follow the
    resume, so rank 1's optimizer state counts too: with the moments it received, rank 1's weights after step 2 are
    rank 0's, and so are its step-3 gradients (a rank 1 left with a fresh optimizer moved rank 0's weights 5e-4)."""
    train = tmp_path / "train.tsv"  # the header and 24 texts: 3 steps of 8
    lines = (DATA / "sentiment_train.tsv").read_text(encoding="utf-8").splitlines()
    train.write_text("\n".join(lines[:25]) + "\n", encoding="utf-8")
    args = [str(train) if a == str(DATA / "sentiment_train.tsv") else a for a in COMMON]
    del args[args.index("--stop-after-steps") : args.index("--stop-after-steps") + 2]
    args += ["--test", str(DATA / "sentiment_test.csv")]
    reference, outputs = tmp_path / "reference", [tmp_path / "node-0", tmp_path / "node-1"]
    one = [*args, "--batch-size", "8", "--lr", "2e-3"]
    assert main([*one, "--output", str(reference)]) == 0
    assert main([*one, "--output", str(outputs[0]), "--stop-after-steps", "1"]) == 0
    node = [*args, "--batch-size", "4", "--lr", "1e-3", "--nnodes", "2", "--nproc", "1", "--resume"]
    nodes = [[*node, "--output", str(out), "--node-rank", str(k)] for k, out in enumerate(outputs)]
    assert run_nodes(nodes, outputs, tmp_path) == [0, 0]

    assert "resumed at step 1 " in (outputs[1] / "logs" / "node-1" / "workerlog.0").read_text()
    assert sorted(os.listdir(outputs[1])) == ["logs"]  # node 1 never had a checkpoint on its disk
    metrics = [json.loads((d / "metrics.json").read_text(encoding="utf-8")) for d in (reference, outputs[0])]
    assert metrics[1]["test"] == metrics[0]["test"]  # scored with best/ on both ranks, each its share
    # rank 1 trained from the state it received: otherwise the averaged gradients, and rank 0's weights, would differ
    assert_same_weights(pdparams(reference / "last/model.pdparams"), pdparams(outputs[0] / "last/model.pdparams"))
    assert_same_weights(saved_weights(reference / "best"), saved_weights(outputs[0] / "best"))
