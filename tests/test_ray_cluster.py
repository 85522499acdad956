"""`gameon bench run --runner ray` on a cluster of separate `ray start` nodes that loses a worker
node or its head in the middle of a matrix.

Every node and the matrix run inside one private network namespace (Ray only ever talks to
127.0.0.1 there), each node in its own process group so a test can kill all of one node's
processes at once, as a machine that dies would lose them.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from test_bench_runner import command, namespace_problem, records, spec_file

from gameon.integrity import file_sha256
from gameon.records import load_record
from gameon.text import plural


def cluster_problem() -> str | None:
    """Why a cluster cannot be started here, or None."""
    if shutil.which("nsenter") is None:
        return "no nsenter command to start processes in the private network namespace"
    return namespace_problem()


pytestmark = [
    pytest.mark.slow,  # 35 s and 75 s; tests/test_bench_runner.py has their scheduler side fast
    pytest.mark.skipif(cluster_problem() is not None, reason=str(cluster_problem())),
]

RAY = Path(sys.executable).with_name("ray")
PORT = 6379
ADDRESS = f"127.0.0.1:{PORT}"
NODE_START_SECONDS = 90
RUN_IDS = [f"online__Reach__fixed__ppo__s{seed}" for seed in range(4)]
HEAD_TEST_STEPS = 16384
"""PPO steps of a run in the head-loss test: about 15 s, longer than the runner's patience
with a silent head (HEAD_LOST_SECONDS), so runs are still in flight when it gives up."""
SPEC = """
name = "{name}"
seeds = {seeds}
eval_episodes_per_skill = 1
curricula = ["fixed"]

[online]
learners = ["ppo"]
env_ids = ["GameOn/Reach-v0"]
budget = {{ total_timesteps = STEPS, eval_every = 256, num_envs = 2 }}
ppo = {{ num_steps = 64, num_minibatches = 4, update_epochs = 1 }}
"""


@dataclass
class Cluster:
    """A private network namespace and the Ray nodes started in it, by name."""

    namespace: subprocess.Popen
    logs: Path
    temp_dir: Path
    nodes: dict[str, subprocess.Popen] = field(default_factory=dict)


def inside(cluster: Cluster, args: list[str]) -> list[str]:
    """A command line that runs `args` in the cluster's network namespace."""
    return ["nsenter", f"--net=/proc/{cluster.namespace.pid}/ns/net", *map(str, args)]


AUTH_TOKEN = secrets.token_hex(16)
"""Ray's token authentication, on for every node and the driver alike: without it, whether a node
uses a token depends on what ~/.ray holds, and a worker node may fail to join the head."""


def ray_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": AUTH_TOKEN}
    return {**env, "RAY_USAGE_STATS_ENABLED": "0", **auth}


def start_node(cluster: Cluster, name: str, *options: str) -> None:
    """`ray start --block` in its own process group; returns once the node has joined."""
    log = cluster.logs / f"{name}.log"
    args = [RAY, "start", "--block", "--disable-usage-stats", "--node-ip-address=127.0.0.1"]
    args += ["--object-store-memory=100000000", *options]
    with open(log, "w") as output:
        node = subprocess.Popen(
            inside(cluster, args),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env=ray_environment(),
        )
    cluster.nodes[name] = node
    deadline = time.monotonic() + NODE_START_SECONDS
    while "Ray runtime started" not in log.read_text():
        assert node.poll() is None, f"node {name} did not start:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"node {name} did not start in {NODE_START_SECONDS} s"
        time.sleep(0.2)


def start_head(cluster: Cluster, cpus: int) -> None:
    start_node(
        cluster,
        "head",
        "--head",
        f"--port={PORT}",
        f"--num-cpus={cpus}",
        "--include-dashboard=false",
        f"--temp-dir={cluster.temp_dir}",
    )


def start_worker(cluster: Cluster, name: str, cpus: int) -> None:
    start_node(cluster, name, f"--address={ADDRESS}", f"--num-cpus={cpus}")


def parents() -> dict[int, int]:
    """Every process's parent, by process id."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        found[int(stat.parent.name)] = int(fields[1])
    return found


def node_processes(node: subprocess.Popen) -> set[int]:
    """The node's `ray start` and every process descended from it: its raylet, the Ray workers
    (each in a process group of its own) and the runs they started."""
    parent_of = parents()
    tree = {node.pid}
    grown = True
    while grown:
        children = {pid for pid, parent in parent_of.items() if parent in tree} - tree
        tree |= children
        grown = bool(children)
    return tree


def kill_node(cluster: Cluster, name: str) -> None:
    """SIGKILL every process of the node at once, as if its machine had died."""
    node = cluster.nodes.pop(name)
    for pid in node_processes(node):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    node.wait()


def stop_cluster(cluster: Cluster) -> None:
    for name in list(cluster.nodes):
        kill_node(cluster, name)
    cluster.namespace.kill()
    cluster.namespace.wait()
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)


@pytest.fixture
def cluster(tmp_path):
    namespace = subprocess.Popen(
        ["unshare", "-n", "sh", "-c", "ip link set lo up && exec sleep infinity"],
        start_new_session=True,
    )
    comm = Path(f"/proc/{namespace.pid}/comm")
    while namespace.poll() is None and comm.read_text().strip() != "sleep":  # lo is up
        time.sleep(0.05)
    # a short path: Ray's Unix sockets live under it
    temp_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    made = Cluster(namespace, tmp_path, temp_dir)
    try:
        yield made
    finally:
        stop_cluster(made)


def start_matrix(cluster: Cluster, args: list[str], log: Path) -> subprocess.Popen:
    """`gameon bench run ...` against the cluster, in its namespace, its output in `log`."""
    with open(log, "w") as output:
        return subprocess.Popen(
            inside(cluster, [sys.executable, "-m", "gameon.benchmark.commands", *args]),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**ray_environment(), "RAY_ADDRESS": ADDRESS},
        )


def wait_for(condition, timeout: float, matrix: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert matrix.poll() is None, f"the matrix ended too soon:\n{log.read_text()[-3000:]}"
        assert time.monotonic() < deadline, f"timed out waiting:\n{log.read_text()[-3000:]}"
        time.sleep(0.1)


def started_runs(results: Path) -> set[str]:
    """The runs whose worker process has started and not yet written its record."""
    started = set()
    for log in results.glob("*/run.log"):
        if "(attempt " in log.read_text() and not (log.parent / "record.json").exists():
            started.add(log.parent.name)
    return started


def finish(matrix: subprocess.Popen, log: Path, timeout: float) -> str:
    try:
        matrix.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(matrix.pid, signal.SIGKILL)
        matrix.wait()
        pytest.fail(f"the matrix did not end within {timeout} s:\n{log.read_text()[-3000:]}")
    return log.read_text()


def run_processes(results: Path) -> list[str]:
    """Command lines of run processes still working in the results directory."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "gameon.benchmark.runs" in text and str(results) in text:
            found.append(text)
    return found


def assert_one_valid_record_per_run(results: Path) -> int:
    """Every run folder holds one finished attempt's record, checkpoint and log; return how
    many records are valid."""
    found = records(results)
    assert sorted(found) == RUN_IDS
    for run_id, path in found.items():
        record = load_record(path)
        assert record.run_id == run_id
        run_dir = path.parent
        assert file_sha256(run_dir / record.checkpoint) == record.checkpoint_sha256
        assert (run_dir / "run.log").read_text().count("final success") == 1, run_id
        assert not (run_dir / "error.txt").exists(), run_id
        assert not [p.name for p in run_dir.rglob("*.tmp")], run_id
    return len(found)


def test_losing_a_worker_node_mid_matrix_retries_its_run_on_the_other(cluster, tmp_path):
    start_head(cluster, cpus=0)
    start_worker(cluster, "worker-1", cpus=1)
    start_worker(cluster, "worker-2", cpus=1)
    results = tmp_path / "results"
    spec = spec_file(tmp_path, SPEC.replace("STEPS", "512"), seeds=range(4))
    log = tmp_path / "matrix.log"
    matrix = start_matrix(cluster, command(spec, results, "--runner", "ray"), log)
    wait_for(lambda: len(started_runs(results)) == 2, 120, matrix, log)  # one on each node
    kill_node(cluster, "worker-1")
    out = finish(matrix, log, timeout=240)

    assert matrix.returncode == 0, out[-3000:]
    assert "Ray cluster at 127.0.0.1:6379, 2 runs at once" in out
    summary = re.search(
        r"(\d+) runs? done now, (\d+) finished before, (\d+) failed, (\d+) retried", out
    )
    assert summary, out[-3000:]
    done, before, failed, retried = map(int, summary.groups())
    assert (done, before, failed) == (4, 0, 0)
    retried_runs = [r for r in RUN_IDS if "(attempt 2)" in (results / r / "run.log").read_text()]
    assert retried == len(retried_runs) >= 1
    assert out.count("retrying ") == retried
    # how Ray reports the run lost with its node depends on which of its processes notices first
    lost = ("NodeDiedError", "WorkerCrashedError", "LocalRayletDiedError", "RaySystemError")
    assert any(name in out for name in lost), out[-3000:]
    valid = assert_one_valid_record_per_run(results)
    assert run_processes(results) == []
    print(f"\nruns total {done}, retried {retried}, records valid {valid}, duplicates 0")


def test_losing_the_head_ends_the_matrix_with_a_clear_message_and_a_rerun_resumes(
    cluster, tmp_path
):
    start_head(cluster, cpus=0)
    start_worker(cluster, "worker", cpus=2)
    results = tmp_path / "results"
    # runs long enough to be in flight for HEAD_LOST_SECONDS after the head is lost
    spec = spec_file(tmp_path, SPEC.replace("STEPS", str(HEAD_TEST_STEPS)), seeds=range(4))
    args = command(spec, results, "--runner", "ray")
    log = tmp_path / "first.log"
    matrix = start_matrix(cluster, args, log)
    wait_for(lambda: len(records(results)) >= 1 and started_runs(results), 180, matrix, log)
    kill_node(cluster, "head")
    lost = time.monotonic()
    out = finish(matrix, log, timeout=90)
    seconds = time.monotonic() - lost
    assert matrix.returncode not in (0, None), out[-3000:]
    last = out.strip().splitlines()[-1]
    assert f"lost the Ray cluster at {ADDRESS}" in last and "run the same command again" in last
    deadline = time.monotonic() + 15
    while run_processes(results):  # the runs in flight on the node left are stopped
        assert time.monotonic() < deadline, run_processes(results)
        time.sleep(0.2)
    kill_node(cluster, "worker")  # what was left of the cluster
    first = records(results)
    finished = {run_id: path.read_bytes() for run_id, path in first.items()}
    for path in first.values():
        load_record(path)

    start_head(cluster, cpus=2)
    log = tmp_path / "rerun.log"
    rerun = start_matrix(cluster, args, log)
    out = finish(rerun, log, timeout=240)
    assert rerun.returncode == 0, out[-3000:]
    flat = " ".join(out.split())  # rich wraps long lines where it prints to a pipe
    assert f"{plural(len(first), 'run')} already finished in {results}: skipped" in flat
    assert (
        f"{plural(len(RUN_IDS) - len(first), 'run')} done now, {len(first)} finished before" in flat
    )
    assert assert_one_valid_record_per_run(results) == len(RUN_IDS)
    assert {run_id: records(results)[run_id].read_bytes() for run_id in finished} == finished
    print(
        f"\nhead lost: the matrix ended {seconds:.0f} s later with: {last}\n"
        f"rerun: {len(first)} runs kept, {len(RUN_IDS) - len(first)} run again"
    )
