"""Checkpoints: round trips, atomic saves, GPU files on a CPU, the course's files, and refusing bad ones."""
import os
import pickle
import sys
from unittest import mock

import pytest
import torch
from torch import nn

from tudui import (CheckpointError, DeviceError, History, Tudui, load_checkpoint, load_model, read_checkpoint,
                   save_checkpoint)
from tudui.cli import main
from helpers import course_tudui_class, registered, saved_as_on_gpu, state_equal

NO_CUDA = not torch.cuda.is_available()


def trained_pair(seed=0, momentum=0.9):
    """A Tudui and an SGD optimizer after one step, so both have non-trivial state."""
    torch.manual_seed(seed)
    model = Tudui()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=momentum)
    loss = nn.functional.cross_entropy(model(torch.rand(4, 3, 32, 32)), torch.tensor([0, 1, 2, 3]))
    loss.backward()
    optimizer.step()
    return model, optimizer


def optimizer_states_equal(a, b):
    sa, sb = a.state_dict(), b.state_dict()
    if sa["param_groups"] != sb["param_groups"] or sa["state"].keys() != sb["state"].keys():
        return False
    return all(torch.equal(sa["state"][i]["momentum_buffer"].cpu(), sb["state"][i]["momentum_buffer"].cpu())
               for i in sa["state"])


# --- our checkpoints ----------------------------------------------------------------------------

def test_round_trip(tmp_path):
    model, optimizer = trained_pair()
    path = tmp_path / "ck.pth"
    assert save_checkpoint(path, model, optimizer, epoch=3, note="hello", history={"loss": [2.3, 1.5]}) == str(path)
    fresh = Tudui()
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.5, momentum=0.9)
    assert not state_equal(fresh.state_dict(), model.state_dict())
    info = load_checkpoint(path, fresh, fresh_opt)
    assert state_equal(fresh.state_dict(), model.state_dict())
    assert fresh_opt.state_dict()["state"]  # momentum buffers came back
    assert optimizer_states_equal(fresh_opt, optimizer)
    assert fresh_opt.param_groups[0]["lr"] == 1e-2
    assert info == {"epoch": 3, "extra": {"note": "hello", "history": {"loss": [2.3, 1.5]}},
                    "format": "tudui-checkpoint"}


def test_load_model_gives_eval_mode_tudui(tmp_path):
    model, _ = trained_pair()
    save_checkpoint(tmp_path / "ck.pth", model)
    loaded = load_model(tmp_path / "ck.pth")
    assert type(loaded) is Tudui and not loaded.training
    assert state_equal(loaded.state_dict(), model.state_dict())


def test_restore_rng_makes_the_same_random_numbers(tmp_path):
    model, _ = trained_pair()
    torch.manual_seed(123)
    save_checkpoint(tmp_path / "ck.pth", model)
    expected = torch.rand(5)
    torch.manual_seed(999)
    load_checkpoint(tmp_path / "ck.pth", Tudui(), restore_rng=False)
    assert not torch.equal(torch.rand(5), expected)
    load_checkpoint(tmp_path / "ck.pth", Tudui(), restore_rng=True)
    assert torch.equal(torch.rand(5), expected)


def test_optimizer_requested_but_not_saved(tmp_path):
    model, _ = trained_pair()
    save_checkpoint(tmp_path / "ck.pth", model)
    with pytest.raises(CheckpointError, match="no optimizer state"):
        load_checkpoint(tmp_path / "ck.pth", Tudui(), torch.optim.SGD(Tudui().parameters(), lr=0.1))


def test_plain_state_dict_file(tmp_path):
    model, _ = trained_pair()
    torch.save(model.state_dict(), tmp_path / "sd.pth")
    fresh = Tudui()
    info = load_checkpoint(tmp_path / "sd.pth", fresh)
    assert info["format"] == "state_dict" and info["epoch"] is None and info["extra"] == {}
    assert state_equal(fresh.state_dict(), model.state_dict())


def test_wrapped_models_save_and_load_plain_keys(tmp_path):
    model, _ = trained_pair()
    wrapped = nn.DataParallel(model)  # state_dict keys gain "module."; the file must not
    save_checkpoint(tmp_path / "ck.pth", wrapped)
    assert list(read_checkpoint(tmp_path / "ck.pth")["model"]) == list(Tudui().state_dict())
    target = nn.DataParallel(Tudui())
    load_checkpoint(tmp_path / "ck.pth", target)
    assert state_equal(target.module.state_dict(), model.state_dict())


def test_save_makes_folders_and_leaves_no_temp_file(tmp_path):
    path = tmp_path / "a" / "b" / "ck.pth"
    save_checkpoint(path, Tudui(), epoch=1)
    assert sorted(os.listdir(path.parent)) == ["ck.pth"]
    save_checkpoint(str(path), Tudui(), epoch=2)  # overwrite in place
    assert sorted(os.listdir(path.parent)) == ["ck.pth"]
    assert read_checkpoint(path)["epoch"] == 2


@pytest.mark.parametrize("interruption", [RuntimeError("disk full"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_interrupted_save_keeps_the_previous_file(tmp_path, monkeypatch, interruption):
    model, _ = trained_pair(seed=0)
    path = tmp_path / "ck.pth"
    save_checkpoint(path, model, epoch=1)
    before = path.read_bytes()

    def half_a_save(obj, f, *args, **kwargs):
        f.write(before[: len(before) // 2])  # part of a file ...
        raise interruption                   # ... then the interruption

    monkeypatch.setattr(torch, "save", half_a_save)
    with pytest.raises(type(interruption)):
        save_checkpoint(path, trained_pair(seed=1)[0], epoch=2)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ck.pth"]  # no temp file left behind
    fresh = Tudui()
    assert load_checkpoint(path, fresh)["epoch"] == 1
    assert state_equal(fresh.state_dict(), model.state_dict())


# --- files saved on a GPU -----------------------------------------------------------------------

def test_gpu_tagged_checkpoint_loads_on_cpu(tmp_path):
    model, optimizer = trained_pair()
    path = tmp_path / "gpu.pth"
    with saved_as_on_gpu():
        save_checkpoint(path, model, optimizer, epoch=5)
    if NO_CUDA:  # the fixture is real: torch alone cannot open it here
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(path, weights_only=True)
    fresh = Tudui()
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    info = load_checkpoint(path, fresh, fresh_opt, device="cpu", restore_rng=True)
    assert info["epoch"] == 5
    assert state_equal(fresh.state_dict(), model.state_dict())
    assert all(p.device.type == "cpu" for p in fresh.parameters())
    assert optimizer_states_equal(fresh_opt, optimizer)
    assert all(s["momentum_buffer"].device.type == "cpu" for s in fresh_opt.state_dict()["state"].values())


def test_gpu_tagged_state_dict_loads_on_cpu(tmp_path):
    model, _ = trained_pair()
    with saved_as_on_gpu():
        torch.save(model.state_dict(), tmp_path / "sd.pth")
    if NO_CUDA:
        with pytest.raises(RuntimeError, match="CUDA"):
            torch.load(tmp_path / "sd.pth")
    loaded = load_model(tmp_path / "sd.pth", device="cpu")
    assert state_equal(loaded.state_dict(), model.state_dict())


@pytest.mark.skipif(not NO_CUDA, reason="this machine has a GPU")
def test_loading_onto_missing_cuda_says_so(tmp_path):
    save_checkpoint(tmp_path / "ck.pth", Tudui())
    with pytest.raises(DeviceError, match="cannot use cuda"):
        load_model(tmp_path / "ck.pth", device="cuda")


# --- the course's whole-model files -------------------------------------------------------------

@pytest.mark.parametrize("gpu_tags", [False, True], ids=["cpu-saved", "gpu-saved"])
@pytest.mark.parametrize("module", ["model", "__main__", "p27_train"])
def test_course_whole_model_file_loads(tmp_path, module, gpu_tags):
    path = tmp_path / "tudui_9.pth"
    torch.manual_seed(0)
    cls = course_tudui_class(module)
    course_model = cls()
    with registered(cls, module):  # the learner's machine: their class is importable
        if gpu_tags:
            with saved_as_on_gpu():
                torch.save(course_model, path)  # the course: torch.save(tudui, "tudui_{}.pth".format(i))
        else:
            torch.save(course_model, path)
    # Here (a fresh process elsewhere): the learner's class is not importable.
    assert module == "__main__" or module not in sys.modules
    assert not hasattr(sys.modules["__main__"], "Tudui")
    with pytest.raises((pickle.UnpicklingError, RuntimeError)):  # what learners hit with plain torch.load
        torch.load(path)
    loaded = load_model(path, device="cpu")
    assert type(loaded) is Tudui
    assert state_equal(loaded.state_dict(), course_model.state_dict())
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(loaded(x), course_model.eval()(x))
    assert load_checkpoint(path, Tudui())["format"] == "course whole-model file"


def test_course_file_refuses_other_layers(tmp_path):
    """A whole model with a layer the course's Tudui does not have (here ReLU) is not unpickled."""
    class Tudui(nn.Module):
        def __init__(self):
            super().__init__()
            self.model = nn.Sequential(nn.Conv2d(3, 32, 5, 1, 2), nn.ReLU())

    Tudui.__module__, Tudui.__qualname__ = "model", "Tudui"
    with registered(Tudui, "model"):
        torch.save(Tudui(), tmp_path / "relu.pth")
    with pytest.raises(CheckpointError, match="ReLU"):
        load_model(tmp_path / "relu.pth")


# --- files that must be refused -----------------------------------------------------------------

class Payload:
    """Runs ``call(*args)`` when unpickled by an unsafe loader."""

    def __init__(self, call, args):
        self.call, self.args = call, args

    def __reduce__(self):
        return self.call, self.args


def payloads(marker):
    return {
        "os.system": Payload(os.system, (f"touch {marker}",)),
        "exec": Payload(exec, (f"open({str(marker)!r}, 'w').close()",)),
    }


@pytest.mark.parametrize("kind", ["os.system", "exec"])
@pytest.mark.parametrize("where", ["whole-file", "inside-a-checkpoint"])
def test_malicious_pickle_is_refused_and_never_runs(tmp_path, kind, where):
    marker = tmp_path / "pwned"
    payload = payloads(marker)[kind]
    path = tmp_path / "evil.pth"
    if where == "whole-file":
        torch.save(payload, path)
    else:
        state = {"format": "tudui-checkpoint", "model": Tudui().state_dict(), "optimizer": None,
                 "epoch": 1, "rng": torch.get_rng_state(), "extra": {"notes": payload}}
        torch.save(state, path)
    with pytest.raises(CheckpointError) as err:
        load_model(path)
    assert "refused to unpickle" in str(err.value)
    assert ("system" in str(err.value)) if kind == "os.system" else ("exec" in str(err.value))
    assert not marker.exists()
    with pytest.raises(CheckpointError):
        read_checkpoint(path)
    assert not marker.exists()


def test_a_foreign_class_named_tudui_does_not_run(tmp_path):
    """Any ``*.Tudui`` is read as OUR Tudui: a stranger's class of that name never executes."""
    marker = tmp_path / "pwned"

    class Tudui:
        def __init__(self, path=None):
            if path:
                open(path, "w").close()

        def __reduce__(self):
            return type(self), (str(marker),)

    Tudui.__module__, Tudui.__qualname__ = "evil", "Tudui"
    with registered(Tudui, "evil"):
        torch.save(Tudui(), tmp_path / "evil.pth")
    with pytest.raises(CheckpointError):
        load_model(tmp_path / "evil.pth")
    assert not marker.exists()


def test_truncated_file(tmp_path):
    save_checkpoint(tmp_path / "ck.pth", Tudui(), epoch=1)
    data = (tmp_path / "ck.pth").read_bytes()
    (tmp_path / "cut.pth").write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(CheckpointError, match=r"not a readable PyTorch checkpoint \(not a zip archive"):
        load_model(tmp_path / "cut.pth")


@pytest.mark.parametrize("content", [
    b"",
    b"hello world\n" * 10,
    b"<!DOCTYPE html><html><head><title>Google Drive</title></head><body>Sign in</body></html>\n",
    bytes(range(256)) * 4,
], ids=["empty", "text", "html-page", "binary"])
def test_damaged_or_foreign_bytes_are_called_corrupt(tmp_path, content):
    (tmp_path / "bad.pth").write_bytes(content)
    with pytest.raises(CheckpointError) as err:
        load_model(tmp_path / "bad.pth")
    assert "not a readable PyTorch checkpoint (" in str(err.value)
    assert "refused" not in str(err.value)


def test_wrong_shape_names_the_parameter(tmp_path):
    state = Tudui().state_dict()
    state["model.7.weight"] = torch.zeros(64, 512)
    torch.save(state, tmp_path / "wrong.pth")
    with pytest.raises(CheckpointError) as err:
        load_model(tmp_path / "wrong.pth")
    msg = str(err.value)
    assert "size mismatch for model.7.weight" in msg and "[64, 512]" in msg and "[64, 1024]" in msg
    assert "model.8" not in msg


def test_missing_and_unexpected_keys_are_named(tmp_path):
    state = Tudui().state_dict()
    del state["model.8.bias"]
    state["model.9.weight"] = torch.zeros(3)
    torch.save(state, tmp_path / "keys.pth")
    with pytest.raises(CheckpointError) as err:
        load_model(tmp_path / "keys.pth")
    assert 'Missing key(s) in state_dict: "model.8.bias"' in str(err.value)
    assert 'Unexpected key(s) in state_dict: "model.9.weight"' in str(err.value)


def test_a_foreign_models_keys_make_a_short_line(tmp_path):
    torch.save({f"layer{i}.weight": torch.zeros(2) for i in range(200)}, tmp_path / "keys.pth")
    with pytest.raises(CheckpointError) as err:
        load_model(tmp_path / "keys.pth")
    msg = str(err.value)
    assert 'Missing key(s) in state_dict: "model.0.weight", "model.0.bias"' in msg and msg.endswith("...")
    assert len(msg) < 400  # torch lists every key; one line stays short


def test_a_model_too_big_for_a_tudui_checkpoint_is_refused_before_unpickling(tmp_path):
    import torchvision
    torch.save(torchvision.models.resnet18().state_dict(), tmp_path / "resnet18.pth")
    with mock.patch("torch.load", side_effect=AssertionError("unpickled")):
        with pytest.raises(CheckpointError, match="refused: it declares .* bytes of data, more than a Tudui"):
            load_model(tmp_path / "resnet18.pth")


@pytest.mark.parametrize("obj, name", [([1, 2, 3], "list"), ({"lr": 0.1}, "dict"), ({}, "dict"),
                                       (torch.zeros(3), "Tensor")])
def test_foreign_objects_are_refused(tmp_path, obj, name):
    torch.save(obj, tmp_path / "foreign.pth")
    with pytest.raises(CheckpointError, match=f"holds a {name}, not a Tudui checkpoint"):
        load_model(tmp_path / "foreign.pth")


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="cannot open the checkpoint: No such file or directory"):
        load_model(tmp_path / "nope.pth")
    (tmp_path / "folder.pth").mkdir()
    with pytest.raises(CheckpointError, match="is a folder, not a checkpoint file"):
        load_model(tmp_path / "folder.pth")


# --- what is saved is what loads ---------------------------------------------------------------

def test_history_and_numpy_values_are_saved_as_plain_types(tmp_path):
    import numpy as np
    history = History(label="cpu", epochs=[1], train_loss=[np.float64(2.3)], test_accuracy=[0.5])
    save_checkpoint(tmp_path / "ck.pth", Tudui(), epoch=np.int64(3), history=history, best=np.float32(0.25))
    info = load_checkpoint(tmp_path / "ck.pth", Tudui())
    assert info["epoch"] == 3 and type(info["epoch"]) is int
    assert info["extra"]["history"]["train_loss"] == [2.3] and info["extra"]["history"]["label"] == "cpu"
    assert info["extra"]["best"] == 0.25


@pytest.mark.parametrize("extra, epoch", [({"f": print}, 1), ({"s": {1, 2}}, 1), ({}, "abc"), ({}, -1), ({}, 1.5)])
def test_unloadable_values_are_refused_at_save_time(tmp_path, extra, epoch):
    with pytest.raises(CheckpointError):
        save_checkpoint(tmp_path / "ck.pth", Tudui(), epoch=epoch, **extra)
    assert not os.listdir(tmp_path)


def test_a_link_is_followed_and_its_target_updated(tmp_path):
    real = tmp_path / "real.pth"
    save_checkpoint(real, Tudui(), epoch=1)
    (tmp_path / "link.pth").symlink_to(real)
    save_checkpoint(tmp_path / "link.pth", Tudui(), epoch=2)
    assert (tmp_path / "link.pth").is_symlink()
    assert read_checkpoint(real)["epoch"] == 2


# --- resuming gives exactly the uninterrupted run ------------------------------------------------

def final_weights(path):
    return read_checkpoint(path)["model"]


@pytest.mark.parametrize("loader", ["dataloader", "resident"])
def test_resume_equals_uninterrupted_training(tmp_path, monkeypatch, capsys, loader):
    monkeypatch.chdir(tmp_path)
    common = ["train", "--data", "synthetic", "--limit", "64", "--batch-size", "16", "--device", "cpu",
              "--seed", "7", "--no-progress", "--loader", loader]
    assert main(common + ["--epochs", "2", "--checkpoint", "straight.pth"]) == 0
    assert main(common + ["--epochs", "1", "--checkpoint", "resumed.pth"]) == 0
    after_one = final_weights("resumed.pth")
    assert main(common + ["--epochs", "2", "--checkpoint", "resumed.pth", "--resume"]) == 0
    out = capsys.readouterr().out
    assert "resuming after epoch 1 from resumed.pth" in out
    straight, resumed = final_weights("straight.pth"), final_weights("resumed.pth")
    assert not state_equal(after_one, resumed)  # the resumed run did train
    assert state_equal(straight, resumed)
    assert read_checkpoint("resumed.pth")["epoch"] == read_checkpoint("straight.pth")["epoch"] == 2


# --- a real GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
def test_real_gpu_checkpoint_loads_on_cpu(tmp_path):
    model, optimizer = trained_pair()
    model_gpu = Tudui().to("cuda")
    model_gpu.load_state_dict(model.state_dict())
    opt_gpu = torch.optim.SGD(model_gpu.parameters(), lr=1e-2, momentum=0.9)
    opt_gpu.load_state_dict(optimizer.state_dict())
    save_checkpoint(tmp_path / "gpu.pth", model_gpu, opt_gpu, epoch=1)
    raw = torch.load(tmp_path / "gpu.pth", weights_only=True)
    assert raw["model"]["model.0.weight"].device.type == "cuda"  # saved on the GPU
    fresh = Tudui()
    fresh_opt = torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9)
    load_checkpoint(tmp_path / "gpu.pth", fresh, fresh_opt, device="cpu")
    assert all(p.device.type == "cpu" for p in fresh.parameters())
    assert state_equal(fresh.state_dict(), model.state_dict())
    assert optimizer_states_equal(fresh_opt, optimizer)


@pytest.mark.gpu
def test_cpu_checkpoint_resumes_on_gpu(tmp_path):
    model, optimizer = trained_pair()
    save_checkpoint(tmp_path / "cpu.pth", model, optimizer, epoch=1)
    target = Tudui()
    target_opt = torch.optim.SGD(target.parameters(), lr=0.1, momentum=0.9)
    load_checkpoint(tmp_path / "cpu.pth", target, target_opt, device="cuda")
    assert all(p.device.type == "cuda" for p in target.parameters())
    assert all(s["momentum_buffer"].device.type == "cuda" for s in target_opt.state.values())
    loss = target(torch.rand(2, 3, 32, 32, device="cuda")).sum()
    loss.backward()
    target_opt.step()  # optimizer state and parameters are on the same device
    assert state_equal(load_model(tmp_path / "cpu.pth", device="cuda").state_dict(), model.state_dict())
