"""Training under torchrun: two CPU processes (gloo), one log, one checkpoint writer, same weights.

The end-to-end tests start ``torchrun --standalone --nproc-per-node=2`` on a
small script that is ``python -m tudui`` (it calls ``tudui.cli.main()``) plus
a record, per rank, of which epochs it saved and whether all ranks ended with
identical weights. The unit tests need no torchrun.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist

from tudui import DeviceError, checkpoint, distributed
from tudui.distributed import LaunchError

# --- without torchrun: one process, nothing to join ---------------------------------------------

TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture
def no_torchrun(monkeypatch):
    for name in TORCHRUN_VARS:
        monkeypatch.delenv(name, raising=False)


def test_single_process_is_not_distributed(no_torchrun):
    assert not distributed.launched_by_torchrun()
    ctx = distributed.setup("cpu")
    assert (ctx.rank, ctx.world_size, ctx.local_rank) == (0, 1, 0)
    assert ctx.device == torch.device("cpu") and ctx.backend is None
    assert ctx.is_main and not ctx.distributed
    assert not dist.is_initialized()
    distributed.teardown()  # nothing joined, nothing to leave


def test_torchrun_with_one_process_is_not_distributed(no_torchrun, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert not distributed.launched_by_torchrun()
    for name, value in LAUNCHED.items():
        monkeypatch.setenv(name, value)
    assert distributed.launched_by_torchrun()


@pytest.mark.parametrize("env, missing", [({"WORLD_SIZE": "2"}, "RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT"),
                                          ({"WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0"},
                                           "MASTER_ADDR, MASTER_PORT")])
def test_half_a_torchrun_launch_is_refused_not_trained_alone(no_torchrun, monkeypatch, env, missing):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(LaunchError) as err:
        distributed.setup("cpu")
    assert str(err.value) == (f"WORLD_SIZE is set, but not {missing}: this environment is half a torchrun launch; "
                              "unset WORLD_SIZE to train in one process, or launch with: torchrun --nproc-per-node=N "
                              "-m tudui train ...")
    assert not dist.is_initialized()


def test_sum_across_ranks_is_identity_when_not_distributed(no_torchrun):
    t = torch.tensor([1.5, 2.0, 3.0])
    assert distributed.sum_across_ranks(t) is t
    assert t.tolist() == [1.5, 2.0, 3.0]


def test_main_first_and_barrier_just_run_in_one_process(no_torchrun):
    ran = []
    with distributed.main_first(distributed.Context()):
        ran.append(True)
    distributed.barrier()
    assert ran == [True]


@pytest.fixture
def gpus(monkeypatch):
    """``gpus(n)``: pretend this machine has n CUDA devices."""
    def pretend(n):
        monkeypatch.setattr(torch.version, "cuda", "12.4")
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "device_count", lambda: n)
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return pretend


def test_a_process_without_its_own_gpu_is_refused(gpus):
    gpus(1)
    assert distributed._device_for("cuda", 0) == torch.device("cuda", 0)
    with pytest.raises(DeviceError, match="--nproc-per-node=1"):
        distributed._device_for("cuda", 1)


def test_auto_under_torchrun_without_gpu_is_cpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert distributed._device_for("auto", 1) == torch.device("cpu")


# --- a malformed torchrun environment: one line saying what to do ------------------------------

LAUNCHED = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


@pytest.mark.parametrize("changes, problem", [
    ({"WORLD_SIZE": "abc"}, "WORLD_SIZE='abc' is not a whole number"),
    ({"RANK": "2"}, "RANK=2 is out of range (must be from 0 to 1)"),
    ({"RANK": "-1"}, "RANK=-1 is out of range (must be from 0 to 1)"),
    ({"RANK": "one"}, "RANK='one' is not a whole number"),
    ({"LOCAL_RANK": "x"}, "LOCAL_RANK='x' is not a whole number"),
    # refused at once: init_process_group would fail after "waiting", or wait the full timeout
    ({"MASTER_PORT": "abc"}, "MASTER_PORT='abc' is not a port (a whole number from 1 to 65535)"),
    ({"MASTER_PORT": "0"}, "MASTER_PORT='0' is not a port (a whole number from 1 to 65535)"),
    ({"MASTER_PORT": "65536"}, "MASTER_PORT='65536' is not a port (a whole number from 1 to 65535)"),
    ({"MASTER_PORT": "9" * 5000}, f"MASTER_PORT='{'9' * 40}' is not a port (a whole number from 1 to 65535)"),
    ({"MASTER_ADDR": "no such host"}, "MASTER_ADDR='no such host' is not an address this machine can reach ("),
    ({"MASTER_ADDR": "x" * 300}, f"MASTER_ADDR='{'x' * 80}' is not an address this machine can reach ("),
])
def test_a_malformed_torchrun_environment_says_what_to_do(no_torchrun, monkeypatch, changes, problem):
    for name, value in {**LAUNCHED, **changes}.items():
        if value is not None:
            monkeypatch.setenv(name, value)
    with pytest.raises(LaunchError) as err:
        distributed.setup("cpu")
    message, suffix = str(err.value), "; launch with: torchrun --nproc-per-node=N -m tudui train ..."
    assert message.startswith(problem) and message.endswith(suffix)
    assert problem.endswith("(") or message == problem + suffix  # the system's reason for an address varies
    assert not dist.is_initialized()


@pytest.fixture
def one_process_group(no_torchrun):
    """A real gloo process group of one process (this one), left again by the test."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_teardown_waits_for_the_others_then_leaves_and_can_be_called_again(one_process_group, monkeypatch):
    calls = []
    barrier, destroy = dist.barrier, dist.destroy_process_group
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: (calls.append("barrier"), barrier(*a, **k)))
    monkeypatch.setattr(dist, "destroy_process_group", lambda *a, **k: (calls.append("destroy"), destroy(*a, **k)))
    distributed.teardown()
    assert calls == ["barrier", "destroy"] and not dist.is_initialized()
    distributed.teardown()  # a second call (e.g. from a finally block) does nothing
    assert calls == ["barrier", "destroy"]


def test_teardown_after_an_error_does_not_wait_for_the_others(one_process_group, monkeypatch):
    """After an error the other processes may never reach a barrier: leave at once (torchrun stops them)."""
    calls = []
    monkeypatch.setattr(dist, "barrier", lambda *a, **k: calls.append("barrier"))
    with pytest.raises(KeyError):
        try:
            raise KeyError("failed mid-epoch")
        finally:
            distributed.teardown()
    assert calls == [] and not dist.is_initialized()


# --- under torchrun: 2 CPU processes -----------------------------------------------------------

RECORDING_MAIN = textwrap.dedent('''
    """``python -m tudui`` that also records, per rank, its checkpoint saves and a weight check."""
    import json, os, sys
    import torch
    import torch.distributed as dist
    from tudui import checkpoint, cli, loops

    record = {"saved_epochs": [], "weights_identical": None}
    save, fit = checkpoint.save_checkpoint, loops.fit

    def recorded_save(path, model, optimizer=None, epoch=None, **extra):
        record["saved_epochs"].append(epoch)
        return save(path, model, optimizer, epoch, **extra)

    def checked_fit(model, *args, **kwargs):
        history = fit(model, *args, **kwargs)
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        copies = [torch.empty_like(weights) for _ in range(dist.get_world_size())]
        dist.all_gather(copies, weights)
        record["weights_identical"] = all(torch.equal(copies[0], c) for c in copies)
        return history

    checkpoint.save_checkpoint, loops.fit = recorded_save, checked_fit
    code = cli.main()
    with open(f"rank{os.environ['RANK']}.json", "w") as f:
        json.dump(record, f)
    sys.exit(code)
''')

# 129 images, 32 per batch: shards of 65 and 64 would give 3 and 2 batches (a hang with the
# resident loader unless the shards are evened out); the test set gets 129 // 5 = 25 images.
TRAIN = ["train", "--device", "cpu", "--limit", "129", "--batch-size", "32", "--checkpoint", "ddp.pth",
         "--no-progress"]


def torchrun(folder, *args, timeout=180):
    """Run torchrun with 2 processes; a hang (e.g. a rank that never exits) fails the test after
    ``timeout`` seconds, and every process it started is killed."""
    for old in folder.glob("rank*.json"):
        old.unlink()
    env = {k: v for k, v in os.environ.items() if k not in TORCHRUN_VARS}
    env.update(TUDUI_DATA="synthetic", OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "recording_main.py", *args]
    with subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True) as proc:
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            if sys.platform == "win32":
                proc.kill()
            else:
                os.killpg(proc.pid, signal.SIGKILL)  # torchrun and the ranks it started
            stdout, stderr = proc.communicate()
            pytest.fail(f"torchrun did not finish within {timeout} s:\n{stdout}{stderr[-4000:]}")
    assert proc.returncode == 0, stdout + stderr[-4000:]
    records = {int(p.stem[4:]): json.loads(p.read_text()) for p in folder.glob("rank*.json")}
    assert sorted(records) == [0, 1]
    stdout = "\n".join(line for line in stdout.splitlines() if not line.startswith("[Gloo]"))  # torch 2.9's
    return stdout, records


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ddp")
    (folder / "recording_main.py").write_text(RECORDING_MAIN)
    stdout, records = torchrun(folder, *TRAIN, "--epochs", "1")
    return folder, stdout, records


@pytest.mark.slow
def test_train_under_torchrun_logs_and_saves_once(first_run):
    folder, stdout, records = first_run
    lines = stdout.splitlines()
    assert lines[0].startswith("device: cpu, 2 processes (gloo); data: synthetic")
    assert sum(line.startswith("device:") for line in lines) == 1
    assert sum(line.startswith("epoch 1: train loss") for line in lines) == 1  # rank 0 only
    assert lines[-1] == "saved ddp.pth"
    assert records[0]["saved_epochs"] == [1] and records[1]["saved_epochs"] == []  # one writer
    assert records[0]["weights_identical"] and records[1]["weights_identical"]
    assert sorted(p.name for p in folder.iterdir() if p.suffix == ".pth") == ["ddp.pth"]  # no temp files
    saved = checkpoint.read_checkpoint(folder / "ddp.pth")
    assert saved["epoch"] == 1
    assert not any(k.startswith("module.") for k in saved["model"])  # saved without the DDP wrapper


@pytest.mark.slow
def test_resume_under_torchrun_continues_from_the_saved_epoch(first_run):
    folder, _, _ = first_run
    stdout, records = torchrun(folder, *TRAIN, "--epochs", "2", "--resume")
    assert "resuming after epoch 1 from ddp.pth" in stdout
    assert "epoch 1:" not in stdout
    assert stdout.count("epoch 2: train loss") == 1
    assert records[0]["saved_epochs"] == [2] and records[1]["saved_epochs"] == []
    assert records[0]["weights_identical"] and records[1]["weights_identical"]
    assert checkpoint.read_checkpoint(folder / "ddp.pth")["epoch"] == 2


@pytest.mark.slow
def test_resident_data_under_torchrun_gives_every_rank_the_same_batches(first_run):
    """Shares of 65 and 64 images would be 3 and 2 batches (DDP would hang): DistributedSampler's evens them."""
    folder, _, _ = first_run
    args = [a if a != "ddp.pth" else "resident.pth" for a in TRAIN]
    stdout, records = torchrun(folder, *args, "--epochs", "2", "--loader", "resident")
    assert stdout.count("loader: resident") == 1 and stdout.count("epoch 2: train loss") == 1
    assert records[0]["saved_epochs"] == [1, 2] and records[1]["saved_epochs"] == []
    assert records[0]["weights_identical"] and records[1]["weights_identical"]


def test_a_numbered_gpu_under_torchrun_is_refused_not_replaced(gpus):
    gpus(2)
    assert distributed._device_for("cuda", 1) == torch.device("cuda", 1)
    with pytest.raises(DeviceError, match="pass --device cuda"):
        distributed._device_for("cuda:0", 1)
