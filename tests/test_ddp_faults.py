"""Issue 24, round 3: DDP under faults. Rank zero from the cluster environment (SLURM too), every rank's RNG state
on resume, and SIGTERM (a scheduler's pre-emption) to some or all ranks of a 2-process gloo run."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

RANK_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "LOCAL_WORLD_SIZE", "TORCHELASTIC_RUN_ID",
                  "MASTER_ADDR", "MASTER_PORT", "LSB_JOBID", "LSB_DJOB_RANKFILE", "JSM_NAMESPACE_RANK",
                  "JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK")


def clean_env(extra: dict | None = None) -> dict:
    """``os.environ`` without any launcher's rank variables (nor SLURM's), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in RANK_VARIABLES and not k.startswith("SLURM_")}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests" / "plugins")]), **(extra or {})}


def slurm_env(procid: int, ntasks: int = 2, job_id: int | None = None) -> dict:
    """The variables ``srun --ntasks-per-node=N`` (one node) sets for task ``procid``."""
    return {"SLURM_NTASKS": str(ntasks), "SLURM_NTASKS_PER_NODE": str(ntasks), "SLURM_NNODES": "1",
            "SLURM_PROCID": str(procid), "SLURM_LOCALID": str(procid), "SLURM_NODEID": "0",
            "SLURM_NODELIST": "localhost", "SLURM_JOB_ID": str(job_id or random.randint(10000, 19999)),
            "SLURM_JOB_NAME": "mtdnn-test"}


# ------------------------------------------------------------------------------------ kind 11. rank zero


@pytest.fixture
def no_launcher(monkeypatch):
    for name in list(os.environ):
        if name in RANK_VARIABLES or name.startswith("SLURM_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_ranks_of_a_plain_process(no_launcher):
    from mtdnn.training.ranks import is_global_zero, process_ranks

    assert process_ranks()[:3] == (0, 0, 1) and is_global_zero()
    assert process_ranks(devices=2)[:3] == (0, 0, 2)  # rank 0 before Lightning launches the other local rank


def test_ranks_under_torchelastic(no_launcher):
    from mtdnn.training.ranks import is_global_zero, process_ranks

    for name, value in {"TORCHELASTIC_RUN_ID": "abc", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
                        "GROUP_RANK": "1", "LOCAL_WORLD_SIZE": "2"}.items():
        no_launcher.setenv(name, value)
    ranks = process_ranks(devices=2)
    assert ranks[:4] == (3, 1, 4, 1) and ranks.environment == "torchelastic" and not is_global_zero()
    no_launcher.setenv("RANK", "0")
    no_launcher.setenv("LOCAL_RANK", "0")
    no_launcher.setenv("GROUP_RANK", "0")
    assert is_global_zero()


def test_ranks_under_slurm(no_launcher):
    from mtdnn.training.ranks import is_global_zero, process_ranks

    for procid in (0, 1):
        for name, value in slurm_env(procid).items():
            no_launcher.setenv(name, value)
        ranks = process_ranks(devices=2)
        assert ranks[:3] == (procid, procid, 2) and ranks.environment == "slurm"
        assert is_global_zero() == (procid == 0)
    # two nodes of two tasks: the SLURM task id is the global rank, whatever --devices says
    for name, value in {"SLURM_NTASKS": "4", "SLURM_NNODES": "2", "SLURM_PROCID": "2", "SLURM_LOCALID": "0",
                        "SLURM_NODEID": "1"}.items():
        no_launcher.setenv(name, value)
    assert process_ranks()[:4] == (2, 0, 4, 1) and not is_global_zero()
    # an interactive allocation (job name bash) is not srun-launched: Lightning's own launcher decides
    no_launcher.setenv("SLURM_JOB_NAME", "bash")
    assert process_ranks().environment == "lightning"


def test_ranks_under_lightnings_launcher(no_launcher):
    from mtdnn.training.ranks import is_global_zero, process_ranks

    no_launcher.setenv("LOCAL_RANK", "1")
    no_launcher.setenv("WORLD_SIZE", "2")
    assert process_ranks(devices=2)[:3] == (1, 1, 2) and not is_global_zero()
    # the second node of two, two devices each: NODE_RANK x devices + LOCAL_RANK (rank_zero_only ignores NODE_RANK)
    no_launcher.setenv("NODE_RANK", "1")
    no_launcher.setenv("LOCAL_RANK", "0")
    no_launcher.setenv("WORLD_SIZE", "4")
    assert process_ranks(devices=2, num_nodes=2)[:4] == (2, 0, 4, 1)
    assert process_ranks(num_nodes=2)[:3] == (2, 0, 4)  # processes per node from WORLD_SIZE / nodes
    assert not is_global_zero()
    no_launcher.delenv("WORLD_SIZE")  # NODE_RANK set before Lightning launches: still not rank zero
    assert not is_global_zero(devices=2, num_nodes=2)


def test_resolve_reexports_is_global_zero():
    from mtdnn.training import ranks, resolve

    assert resolve.is_global_zero is ranks.is_global_zero


# Each process counts its own calls of the run-directory preparation and config.yaml writing, then runs the command.
COUNTING_MAIN = """
import os, sys, runpy
from pathlib import Path
import mtdnn.training.pipeline as pipeline
record = Path(os.environ["WRITERS_FILE"])
def counted(name, fn):
    def wrapper(*args, **kwargs):
        with record.open("a") as f:
            f.write(f"{name} {os.environ['SLURM_PROCID']}\\n")
        return fn(*args, **kwargs)
    return wrapper
pipeline.prepare_run_dir = counted("prepare_run_dir", pipeline.prepare_run_dir)  # where execute calls it
pipeline.write_yaml_atomic = counted("write_config", pipeline.write_yaml_atomic)
sys.argv = ["mtdnn.train", *sys.argv[1:]]
runpy.run_module("mtdnn.train", run_name="__main__")
"""


def tiny_task(tmp_path: Path, rows: int = 16, dev_rows: int | None = None) -> Path:
    """A pair-classification task over small TSVs in ``tmp_path`` (``dev_rows`` rows of dev)."""
    def tsv(n):
        return "sentence1\tsentence2\tlabel\n" + "".join(
            f"premise number {i} with a few more words\thypothesis {i} and words\t{'yes' if i % 2 else 'no'}\n"
            for i in range(n))

    (tmp_path / "train.tsv").write_text(tsv(rows))
    (tmp_path / "dev.tsv").write_text(tsv(dev_rows or rows))
    path = tmp_path / "tiny.yaml"
    path.write_text("tasks:\n  tiny:\n    type: classification\n    splits:\n      train: {path: train.tsv}\n"
                    "      dev: {path: dev.tsv}\n    text: [sentence1, sentence2]\n    label: label\n"
                    "    labels: ['no', 'yes']\n")
    return path


def kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.mark.slow
def test_srun_tasks_have_one_writer_of_the_run_directory(tmp_path, tiny_encoder):
    """Two processes with the variables of ``srun --ntasks-per-node=2``: only SLURM task 0 prepares the run
    directory and writes config.yaml, and the two form one 2-rank DDP run that completes."""
    task = tiny_task(tmp_path, rows=8)
    writers = tmp_path / "writers.txt"
    args = [str(task), "--data-dir", str(tmp_path), "--encoder", tiny_encoder, "--batch-size", "4",
            "--max-epochs", "1", "--accelerator", "cpu", "--devices", "2", "--strategy", "ddp",
            "--output-dir", str(tmp_path / "run")]
    job = random.randint(10000, 19999)
    procs = [subprocess.Popen([sys.executable, "-c", COUNTING_MAIN, *args], cwd=tmp_path, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                              env=clean_env({**slurm_env(r, job_id=job), "WRITERS_FILE": str(writers)}))
             for r in (0, 1)]
    try:
        outputs = [p.communicate(timeout=240)[0] for p in procs]
    finally:
        for p in procs:
            kill_group(p)
    for p, out in zip(procs, outputs):
        assert p.returncode == 0, out[-3000:]
    assert sorted(writers.read_text().split("\n")[:-1]) == ["prepare_run_dir 0", "write_config 0"]
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["status"] == "complete"


# ----------------------------------------------------------------------- kind 3. SIGTERM under 2-rank DDP


def ddp_args(task: Path, data_dir: Path, encoder: str, run_dir: Path, *extra: str) -> list[str]:
    return [str(task), "--data-dir", str(data_dir), "--encoder", encoder, "--accelerator", "cpu", "--devices", "2",
            "--strategy", "ddp", "--output-dir", str(run_dir), *extra]


class DDPRun:
    """``python -m mtdnn.train ... --devices 2 --strategy ddp`` in its own session; rank 1 is the process Lightning
    launches from rank 0 (found by its ``LOCAL_RANK=1`` under ``/proc``)."""

    def __init__(self, args: list[str], cwd: Path, env: dict | None = None):
        self.log_path = cwd / f"ddp-{time.monotonic_ns()}.log"
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "mtdnn.train", *args], cwd=cwd, env=clean_env(env),
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        self.rank1: int | None = None

    def find_rank1(self, timeout: float = 120) -> int:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pid in children(self.proc.pid):
                try:
                    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                if b"LOCAL_RANK=1" in environ:
                    self.rank1 = pid
                    return pid
            assert self.proc.poll() is None, self.output()
            time.sleep(0.05)
        raise AssertionError(f"no rank 1 after {timeout} s\n{self.output()}")

    def wait_for(self, path: Path, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while not path.exists():
            assert self.proc.poll() is None, self.output()
            assert time.monotonic() < deadline, f"no {path} after {timeout} s\n{self.output()}"
            time.sleep(0.02)

    def wait(self, timeout: float) -> int:
        """Rank 0's exit code; both ranks must be gone within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        try:
            code = self.proc.wait(timeout=timeout)
            while self.rank1 is not None and alive(self.rank1):
                assert time.monotonic() < deadline, f"rank 1 still running after {timeout} s\n{self.output()}"
                time.sleep(0.05)
            return code
        except subprocess.TimeoutExpired:
            raise AssertionError(f"rank 0 still running after {timeout} s\n{self.output()}") from None
        finally:
            self.kill()

    def kill(self) -> None:
        kill_group(self.proc)
        if self.rank1 is not None and alive(self.rank1):
            os.kill(self.rank1, signal.SIGKILL)

    def output(self) -> str:
        self.log.flush()
        return self.log_path.read_text()[-6000:]


def children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


MID_TRAINING = ("--batch-size", "4", "--max-epochs", "4", "--deterministic", "--keep-last-checkpoint")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, tiny_encoder) -> tuple[Path, Path]:
    """The task of the mid-training tests and its uninterrupted 2-rank run (dropout 0.1)."""
    root = tmp_path_factory.mktemp("mid-training")
    task = tiny_task(root, rows=64, dev_rows=8)
    code, out = run_ddp(ddp_args(task, root, tiny_encoder, root / "straight", *MID_TRAINING), root)
    assert code == 0, out
    return task, root / "straight"


@pytest.mark.slow
@pytest.mark.parametrize("target", ["both", "rank0", "rank1"])
def test_sigterm_mid_training_stops_every_rank_with_143(tmp_path, tiny_encoder, uninterrupted, target):
    """SIGTERM from outside, by PID, while the two ranks train: every rank stops at one step boundary, exits 143
    within 60 s, and leaves one last.ckpt of that step, which --resume continues to the uninterrupted run's
    weights, bitwise."""
    import torch

    task, straight = uninterrupted
    run_dir = tmp_path / "run"
    args = ddp_args(task, task.parent, tiny_encoder, run_dir, *MID_TRAINING)
    run = DDPRun([*args, "--checkpoint-every-n-steps", "3"], tmp_path)
    try:
        rank1 = run.find_rank1()
        run.wait_for(run_dir / "checkpoints" / "last.ckpt")  # step 3: training is under way
        time.sleep(0.3)
        for pid in {"both": [run.proc.pid, rank1], "rank0": [run.proc.pid], "rank1": [rank1]}[target]:
            os.kill(pid, signal.SIGTERM)
        code = run.wait(timeout=60)
    finally:
        run.kill()
    out = run.output()
    assert code == 143, out
    assert "interrupted: rank 0: SIGTERM" in out and "interrupted: rank 1: SIGTERM" in out, out
    assert "Traceback" not in out and "still running" not in out, out  # agreed at a step, not the watchdog
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert 3 <= ckpt["global_step"] < 64, out
    rng = [torch.load(run_dir / "checkpoints" / f"rng-rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert [r["global_step"] for r in rng] == [ckpt["global_step"]] * 2
    assert not (run_dir / "metrics.json").exists()

    code, out = run_ddp([*args, "--resume"], tmp_path)
    assert code == 0, out
    a, b = (torch.load(d / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
            for d in (straight, run_dir))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# ---------------------------------------------------------------- kind 4. exact resume of a 2-rank run


def run_ddp(args: list[str], cwd: Path, env: dict | None = None, timeout: float = 240) -> tuple[int, str]:
    run = DDPRun(args, cwd, env)
    try:
        run.find_rank1()
        return run.wait(timeout), run.output()
    finally:
        run.kill()


@pytest.mark.slow
def test_two_rank_run_with_dropout_resumes_bitwise(tmp_path, tiny_encoder):
    """Dropout on (0.1), --deterministic: a 2-rank run stopped by SIGTERM mid-epoch and resumed ends with the
    weights (bitwise) and dev scores of the uninterrupted 2-rank run; rank 1 gets its own random state back."""
    import torch

    task = tiny_task(tmp_path, rows=16, dev_rows=8)
    common = ("--batch-size", "4", "--max-epochs", "2", "--deterministic", "--keep-last-checkpoint")
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    code, out = run_ddp(ddp_args(task, tmp_path, tiny_encoder, straight, *common), tmp_path)
    assert code == 0, out
    code, out = run_ddp(ddp_args(task, tmp_path, tiny_encoder, resumed, *common), tmp_path,
                        {"MTDNN_FAULT_AT_STEP": "3"})  # mid-epoch 1 of 4 steps
    assert code == 143, out
    assert torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == 3
    code, out = run_ddp(ddp_args(task, tmp_path, tiny_encoder, resumed, *common, "--resume"), tmp_path)
    assert code == 0, out
    assert "not exactly" not in out, out

    a, b = (torch.load(d / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]
            for d in (straight, resumed))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (straight, resumed))
    assert [e["tasks"] for e in ma["epochs"]] == [e["tasks"] for e in mb["epochs"]]


def test_resume_with_another_world_size_is_refused(tmp_path):
    """A checkpoint of a 2-rank run cannot be resumed by 1 process: exit 2, naming both world sizes."""
    import torch

    from mtdnn.errors import ConfigError
    from mtdnn.training.resume import check_world_size

    ckpt = tmp_path / "last.ckpt"
    torch.save({"global_step": 3, "state_dict": {}, "mtdnn": {"world_size": 2}}, ckpt)
    check_world_size(ckpt, 2)
    with pytest.raises(ConfigError, match=r"world size 2.*world size 1"):
        check_world_size(ckpt, 1)
    torch.save({"global_step": 3, "state_dict": {}, "mtdnn": {}}, ckpt)  # saved before the world size was kept
    check_world_size(ckpt, 1)


@pytest.mark.slow
@pytest.mark.parametrize("target", ["both", "rank0", "rank1"])
def test_sigterm_during_dev_evaluation_saves_it_and_stops_every_rank(tmp_path, tiny_encoder, target):
    """SIGTERM while the two ranks evaluate a large dev split: the evaluation ends, last.ckpt holds it (epoch 1,
    step 2), every rank exits 143 within 60 s; --resume then completes the run without repeating it."""
    import torch

    task = tiny_task(tmp_path, rows=8, dev_rows=6000)
    run_dir = tmp_path / "run"
    args = ddp_args(task, tmp_path, tiny_encoder, run_dir, "--batch-size", "4", "--eval-batch-size", "4",
                    "--max-epochs", "2", "--checkpoint-every-n-steps", "1")
    run = DDPRun(args, tmp_path)
    try:
        rank1 = run.find_rank1()
        run.wait_for(run_dir / "checkpoints" / "last.ckpt")  # step 1 of 2; the evaluation follows step 2
        time.sleep(1.0)
        for pid in {"both": [run.proc.pid, rank1], "rank0": [run.proc.pid], "rank1": [rank1]}[target]:
            os.kill(pid, signal.SIGTERM)
        code = run.wait(timeout=60)
    finally:
        run.kill()
    out = run.output()
    assert code == 143, out
    assert "interrupted: rank 0: SIGTERM" in out and "interrupted: rank 1: SIGTERM" in out, out
    assert "Traceback" not in out and "still running" not in out, out
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert ckpt["global_step"] == 2 and len(ckpt["mtdnn"]["dev_history"]) == 1, out
    if target == "both":
        code, out = run_ddp([*args, "--resume"], tmp_path)
        assert code == 0, out
        assert [e["step"] for e in json.loads((run_dir / "metrics.json").read_text())["epochs"]] == [2, 4]


# ------------------------------------------------------------- kind 3. a dead peer, SIGTERM outside training


@pytest.mark.slow
def test_a_dead_rank_ends_rank_0_with_one_message(tmp_path, tiny_encoder):
    """SIGKILL to rank 1 mid-training: rank 0 stops with one line naming another rank's death (exit 1), no
    traceback from gloo."""
    task = tiny_task(tmp_path, rows=96, dev_rows=8)
    run_dir = tmp_path / "run"
    run = DDPRun(ddp_args(task, tmp_path, tiny_encoder, run_dir, "--batch-size", "4", "--max-epochs", "4",
                          "--checkpoint-every-n-steps", "3"), tmp_path)
    try:
        rank1 = run.find_rank1()
        run.wait_for(run_dir / "checkpoints" / "last.ckpt")
        os.kill(rank1, signal.SIGKILL)
        code = run.wait(timeout=40)
    finally:
        run.kill()
    out = run.output()
    assert code == 1, out
    assert "error: rank 0: another rank of this 2-process run died" in out and "--resume" in out, out
    assert "Traceback" not in out, out


def test_sigterm_outside_training_is_interrupted_with_143(capsys):
    """SIGTERM while a command does something else than train (export, teacher caching, prediction): one line,
    exit code 143, and the previous SIGTERM handler back afterwards."""
    from mtdnn.errors import run_cli

    def main(argv):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
        return 0

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exit_info:
        run_cli(main, [])
    assert exit_info.value.code == 143
    assert capsys.readouterr().err.startswith("interrupted: SIGTERM")
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory, tiny_encoder) -> Path:
    """An export of the tiny encoder with an untrained rte head."""
    from mtdnn.modeling.model import MultiTaskModel, load_encoder, load_tokenizer
    from mtdnn.tasks.taskdef import load_task_defs, select_tasks
    from mtdnn.training.export import export_model

    glue = str(ROOT / "task_defs" / "glue.yaml")
    tasks = select_tasks(load_task_defs(glue), ["rte"], glue)
    model = MultiTaskModel(load_encoder(tiny_encoder), tasks)
    path = tmp_path_factory.mktemp("export") / "export"
    return export_model(model, load_tokenizer(tiny_encoder), tasks, path, source_encoder=tiny_encoder)


def test_sigterm_during_prediction_is_interrupted_with_143(export_dir, tmp_path):
    """A real command: ``mtdnn.predict`` on many rows, SIGTERM once it runs: 'interrupted', exit 143."""
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"sentence1": f"premise {i} " * 20, "sentence2": f"hypothesis {i} " * 20})
                            + "\n" for i in range(60000)))
    proc = subprocess.Popen([sys.executable, "-m", "mtdnn.predict", str(export_dir), "--task", "rte", "--input",
                             str(rows), "--output", str(tmp_path / "out.jsonl")], cwd=tmp_path, env=clean_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        time.sleep(6)  # imports, loading the export, reading and scoring the rows
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        os.kill(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        kill_group(proc)
    assert proc.returncode == 143, err[-3000:]
    assert "interrupted: SIGTERM" in err and "Traceback" not in err, err[-3000:]
