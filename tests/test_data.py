"""CIFAR-10 as the course loads it, the synthetic stand-in, and DataLoader settings per device."""
import os
import pickle
import socket
import time
import urllib.request

import numpy as np
import pytest
import torch
import torchvision.datasets.cifar as tv_cifar
import torch.distributed as dist
from torch.utils.data import DistributedSampler, SequentialSampler

import tudui
from tudui import CLASSES, DataError, ResidentLoader, SyntheticCIFAR10, cifar10, describe_data, is_synthetic, loaders
from tudui.data import DOWNLOAD_TIMEOUT_S, cifar10_on_disk, default_num_workers, default_source
from helpers import course_setup

CIFAR10_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


@pytest.fixture
def no_download(monkeypatch):
    """CIFAR-10's download fails at once (as with no network); returns the list of attempted URLs."""
    attempts = []

    def fail(url, *args, **kwargs):
        attempts.append(url)
        raise OSError("no network in the tests")

    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", fail)
    return attempts


# --- the synthetic stand-in ---------------------------------------------------------------------

def test_synthetic_is_deterministic_from_the_seed():
    a = SyntheticCIFAR10(train=True, size=300, seed=1)
    b = SyntheticCIFAR10(train=True, size=300, seed=1)
    c = SyntheticCIFAR10(train=True, size=300, seed=2)
    assert np.array_equal(a.data, b.data) and a.targets == b.targets
    assert not np.array_equal(a.data, c.data)
    assert a.targets != c.targets


def test_train_and_test_splits_differ():
    train = SyntheticCIFAR10(train=True, size=200)
    test = SyntheticCIFAR10(train=False, size=200)
    assert not np.array_equal(train.data, test.data)
    assert train.train and not test.train


def test_limit_gives_a_prefix():
    big = cifar10(True, source="synthetic", limit=1500)  # more than one internal chunk
    small = cifar10(True, source="synthetic", limit=300)
    assert len(big) == 1500 and len(small) == 300
    assert np.array_equal(big.data[:300], small.data)
    assert big.targets[:300] == small.targets


def test_limit_is_capped_at_the_split_size():
    """Never more images than CIFAR-10 has, and never an allocation for more (10**12 would not fit)."""
    whole = SyntheticCIFAR10(train=False)
    capped = cifar10(False, source="synthetic", limit=10**12)
    assert len(whole) == len(capped) == len(capped.targets) == 10_000
    assert np.array_equal(whole.data, capped.data)
    assert len(SyntheticCIFAR10(train=False, size=10_001)) == 10_000


def test_data_looks_like_cifar10():
    ds = cifar10(False, source="synthetic", limit=1000)
    assert isinstance(ds.data, np.ndarray)
    assert ds.data.dtype == np.uint8 and ds.data.shape == (1000, 32, 32, 3)
    assert isinstance(ds.targets, list) and all(type(t) is int for t in ds.targets)
    assert set(ds.targets) == set(range(10))  # every class shows up in 1000 images
    assert ds.classes == CIFAR10_NAMES == CLASSES
    assert ds.data.std() > 10  # images, not a constant


def test_items_are_totensor_floats():
    ds = cifar10(True, source="synthetic", limit=20)
    for i in (0, 7, 19):
        img, target = ds[i]
        assert isinstance(img, torch.Tensor) and img.dtype == torch.float32
        assert img.shape == (3, 32, 32)
        assert 0.0 <= img.min() and img.max() <= 1.0
        expected = torch.from_numpy(ds.data[i]).permute(2, 0, 1).float() / 255
        assert torch.equal(img, expected)
        assert target == ds.targets[i]


def test_synthetic_classes_are_distinct_patterns():
    """Same-class images are closer to their class mean than to any other class's (learnable)."""
    ds = SyntheticCIFAR10(train=True, size=1000)
    x = ds.data.reshape(len(ds), -1).astype(np.float32)
    y = np.array(ds.targets)
    means = np.stack([x[y == k].mean(0) for k in range(10)])
    nearest = ((x[:, None, :] - means[None]) ** 2).sum(-1).argmin(1)
    assert (nearest == y).mean() > 0.9


def test_is_synthetic_and_describe_data():
    ds = cifar10(True, source="synthetic", limit=1234)
    assert is_synthetic(ds)
    text = describe_data(ds)
    assert "synthetic" in text and "train" in text and "1,234" in text
    assert "test" in describe_data(cifar10(False, source="synthetic", limit=5))
    assert not is_synthetic(object())


def test_describe_data_in_chinese(monkeypatch):
    monkeypatch.setenv("TUDUI_LANG", "zh")
    assert describe_data(cifar10(True, source="synthetic", limit=3000)) == "代替 CIFAR-10 的合成数据，训练集，3,000 张图片"
    assert describe_data(cifar10(False, source="synthetic", limit=5)) == "代替 CIFAR-10 的合成数据，测试集，5 张图片"


def test_describe_data_in_a_language_other_than_the_one_in_force(monkeypatch):
    """A lesson titles a plot in both languages: ``{lang: describe_data(train_set, lang) for lang in ("en", "zh")}``."""
    monkeypatch.setenv("TUDUI_LANG", "zh")
    ds = cifar10(True, source="synthetic", limit=3000)
    assert describe_data(ds, "en") == "synthetic stand-in for CIFAR-10, train set, 3,000 images"
    assert describe_data(ds, "zh") == describe_data(ds) == "代替 CIFAR-10 的合成数据，训练集，3,000 张图片"


@pytest.mark.parametrize("limit, error", [(0, ValueError), (-3, ValueError), (2.5, TypeError), ("10", TypeError),
                                          (True, TypeError)])
def test_limit_must_be_a_positive_whole_number(limit, error):
    with pytest.raises(error, match=r"^limit(=-?\d+ is out of range: it must be at least 1| must be a whole number)"):
        cifar10(True, source="synthetic", limit=limit)


@pytest.mark.parametrize("seed, error", [(2**64, ValueError), (-1, ValueError), (1.5, TypeError), (None, TypeError)])
def test_a_seed_torch_cannot_take_is_named(seed, error):
    train = cifar10(True, source="synthetic", limit=8)
    for call in (lambda: cifar10(True, source="synthetic", limit=8, seed=seed),
                 lambda: loaders(train, train, batch_size=4, num_workers=0, seed=seed),
                 lambda: ResidentLoader(train, batch_size=4, seed=seed)):
        with pytest.raises(error, match="^seed"):
            call()


@pytest.mark.parametrize("make", ["file", "device", "through a file"])
def test_a_data_root_that_is_not_a_folder_is_refused_before_anything_is_printed(tmp_path, capsys, make):
    (tmp_path / "file").write_text("x")
    root = {"file": tmp_path / "file", "device": "/dev/null", "through a file": tmp_path / "file" / "data"}[make]
    for source in ("auto", "cifar10"):
        with pytest.raises(DataError, match=r"^the data root '.+' is not a folder \(a file or a device\)"):
            cifar10(True, root=root, source=source, limit=8)
    assert capsys.readouterr() == ("", "")


# --- choosing the source ------------------------------------------------------------------------

def test_unknown_source_raises():
    with pytest.raises(DataError, match="nope"):
        cifar10(True, source="nope")


def test_invalid_tudui_data_raises(monkeypatch):
    monkeypatch.setenv("TUDUI_DATA", "imagenet")
    with pytest.raises(DataError, match="TUDUI_DATA"):
        default_source()
    with pytest.raises(DataError, match="TUDUI_DATA"):
        cifar10(True, limit=10)


@pytest.mark.parametrize("value, expected", [("synthetic", "synthetic"), (" Synthetic ", "synthetic"),
                                             ("cifar10", "cifar10"), ("", "auto"), (None, "auto")])
def test_tudui_data_selects_the_default(monkeypatch, value, expected):
    if value is None:
        monkeypatch.delenv("TUDUI_DATA", raising=False)
    else:
        monkeypatch.setenv("TUDUI_DATA", value)
    assert default_source() == expected


def test_tudui_data_synthetic_is_used_when_no_source_is_given(tmp_path, no_download):
    ds = cifar10(True, root=str(tmp_path), limit=10)
    assert is_synthetic(ds)
    assert no_download == []  # never tried the real set


def test_cifar10_missing_raises_with_instructions(tmp_path, no_download):
    root = tmp_path / "empty"
    root.mkdir()
    with pytest.raises(DataError) as err:
        cifar10(False, root=str(root), source="cifar10")
    msg = str(err.value)
    assert "CIFAR-10 (test)" in msg
    assert str(root) in msg
    assert "https://www.cs.toronto.edu/~kriz/cifar.html" in msg and "cifar-10-python.tar.gz" in msg
    assert "no network in the tests" in msg  # the reason the download failed
    assert len(no_download) == 1  # it did try, once


def test_a_quick_run_says_the_download_then_falls_back_to_synthetic_in_one_line(tmp_path, no_download, capsys):
    ds = cifar10(True, root=str(tmp_path), source="auto", limit=50, seed=3)  # quick: $TUDUI_QUICK=1 in the tests
    assert is_synthetic(ds) and len(ds) == 50
    assert np.array_equal(ds.data, SyntheticCIFAR10(True, size=50, seed=3).data)
    out, err = capsys.readouterr()
    assert out == ""
    announced, fallback = err.strip().splitlines()
    assert announced == (f"CIFAR-10 is not in {str(tmp_path)!r}: downloading it there (about 170 MB from "
                         f"www.cs.toronto.edu; the download stops if no data arrives for {DOWNLOAD_TIMEOUT_S} s)")
    assert fallback.endswith(": using the synthetic stand-in for the train set")
    assert fallback.startswith("CIFAR-10 (train) is not in") and "no network in the tests" in fallback


def test_tudui_data_auto_falls_back_too(tmp_path, no_download, monkeypatch, capsys):
    monkeypatch.setenv("TUDUI_DATA", "auto")
    ds = cifar10(False, root=str(tmp_path), limit=5)
    assert is_synthetic(ds) and not ds.train
    assert capsys.readouterr().err.strip().splitlines()[-1].endswith("using the synthetic stand-in for the test set")


def test_a_quick_run_falls_back_in_chinese(tmp_path, no_download, capsys, monkeypatch):
    monkeypatch.setenv("TUDUI_LANG", "zh")
    ds = cifar10(False, root=str(tmp_path), source="auto", limit=5)
    assert is_synthetic(ds)
    announced, fallback = capsys.readouterr().err.strip().splitlines()
    assert announced.startswith(f"{str(tmp_path)!r} 里没有 CIFAR-10：现在把它下载到那里（约 170 MB")
    assert fallback.endswith("：测试集改用合成数据") and "里没有 CIFAR-10（测试集），也没能下载" in fallback


def test_an_archive_in_root_is_extracted_without_a_download_announcement(tmp_path, no_download, capsys):
    (tmp_path / "cifar-10-python.tar.gz").write_bytes(b"")  # torchvision checks and extracts it (here: the stub)
    cifar10(True, root=str(tmp_path), source="auto", limit=5)
    assert "170 MB" not in capsys.readouterr().err and len(no_download) == 1


@pytest.mark.parametrize("how", ["TUDUI_QUICK=0", "full=True"])
def test_a_full_size_run_never_falls_back_to_synthetic(tmp_path, no_download, monkeypatch, how):
    """On a paid or rationed GPU, a full run on fake data would waste it: it stops and says what to do."""
    if how == "TUDUI_QUICK=0":
        monkeypatch.setenv("TUDUI_QUICK", "0")
    with pytest.raises(DataError) as err:
        cifar10(True, root=str(tmp_path), source="auto", **({"full": True} if how == "full=True" else {}))
    msg = str(err.value)
    assert msg.startswith(f"CIFAR-10 (train) is not in {str(tmp_path)!r} and could not be downloaded (no network")
    assert f"put the course's cifar-10-batches-py folder (or cifar-10-python.tar.gz as downloaded) into " \
           f"{str(tmp_path)!r}" in msg
    assert "TUDUI_QUICK=1 for quick mode" in msg and "%env TUDUI_QUICK=1" in msg
    assert "\n" not in msg


def test_full_false_keeps_the_stand_in_even_where_quick_mode_says_full(tmp_path, no_download, monkeypatch):
    monkeypatch.setenv("TUDUI_QUICK", "0")
    assert is_synthetic(cifar10(True, root=str(tmp_path), source="auto", limit=5, full=False))


def test_the_full_size_stop_is_in_chinese(tmp_path, no_download, monkeypatch):
    monkeypatch.setenv("TUDUI_QUICK", "0")
    monkeypatch.setenv("TUDUI_LANG", "zh")
    with pytest.raises(DataError) as err:
        cifar10(False, root=str(tmp_path), source="auto")
    msg = str(err.value)
    assert msg.startswith(f"{str(tmp_path)!r} 里没有 CIFAR-10（测试集），也没能下载（no network in the tests）")
    assert f"完整规模的运行不会改用合成数据：请把课程用的 cifar-10-batches-py 文件夹" in msg
    assert "设置 TUDUI_QUICK=1，改用快速模式" in msg


@pytest.fixture
def fake_cifar10_root(tmp_path, monkeypatch):
    """A tiny CIFAR-10 in the real on-disk format (the md5 check is made to accept it)."""
    folder = tmp_path / "cifar" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    batches = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (4, 3 * 32 * 32), dtype=np.uint8)
        labels = rng.integers(0, 10, 4).tolist()
        batches[name] = (data, labels)
        with open(folder / name, "wb") as f:
            pickle.dump({"data": data, "labels": labels}, f)
    with open(folder / "batches.meta", "wb") as f:
        pickle.dump({"label_names": CIFAR10_NAMES}, f)
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda path, md5=None: os.path.isfile(path))
    return str(tmp_path / "cifar"), batches


@pytest.mark.parametrize("source", ["cifar10", "auto"])
def test_real_cifar10_is_loaded_when_present(fake_cifar10_root, no_download, source, capsys):
    root, batches = fake_cifar10_root
    train = cifar10(True, root=root, source=source, limit=6)
    test = cifar10(False, root=root, source=source)
    assert not is_synthetic(train) and "synthetic" not in describe_data(train)
    assert len(train) == 6 and len(test) == 4
    first = np.concatenate([batches["data_batch_1"][0], batches["data_batch_2"][0]])[:6]
    assert np.array_equal(train.data, first.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
    assert train.targets == (batches["data_batch_1"][1] + batches["data_batch_2"][1])[:6]
    img, _ = train[0]
    assert img.shape == (3, 32, 32) and img.dtype == torch.float32  # ToTensor, as in the course
    assert no_download == [] and capsys.readouterr().err == ""


def test_the_download_gives_up_on_a_silent_network(tmp_path, monkeypatch):
    """A firewall that drops packets stalls a download with no timeout for minutes: ours has one,
    only while downloading."""
    seen = []

    def stalled(url, *args, **kwargs):
        seen.append(socket.getdefaulttimeout())
        raise TimeoutError("timed out")

    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", stalled)
    before = socket.getdefaulttimeout()
    with pytest.raises(DataError, match=rf"could not be downloaded \(the download stalled: no data for "
                                        rf"{DOWNLOAD_TIMEOUT_S} s \(DOWNLOAD_TIMEOUT_S\)\)"):
        cifar10(True, root=str(tmp_path), source="cifar10")
    assert seen == [DOWNLOAD_TIMEOUT_S] and 0 < DOWNLOAD_TIMEOUT_S <= 60
    assert socket.getdefaulttimeout() == before


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_proxy_that_never_answers_ends_the_download_at_the_stated_limit(tmp_path, monkeypatch, capsys, scheme):
    """The real download code, through a proxy that takes the connection and then says nothing."""
    silent = socket.create_server(("127.0.0.1", 0))  # listens, never accepts: connects succeed, reads wait
    monkeypatch.setattr(tudui.data, "DOWNLOAD_TIMEOUT_S", 1)
    monkeypatch.setattr(tv_cifar.CIFAR10, "url", f"{scheme}://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz")
    for name in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.setenv(name, f"http://127.0.0.1:{silent.getsockname()[1]}")
    for name in ("no_proxy", "NO_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(urllib.request, "_opener", None)  # urlopen reads the proxy settings into it once
    start = time.monotonic()
    with silent, pytest.raises(DataError, match=r"the download stalled: no data for 1 s"):
        cifar10(True, root=str(tmp_path), source="cifar10")
    assert time.monotonic() - start < 10
    assert "the download stops if no data arrives for 1 s" in capsys.readouterr().err


def test_damaged_files_are_named_not_blamed_on_the_network(fake_cifar10_root, no_download, monkeypatch):
    root, _ = fake_cifar10_root
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda path, md5=None: not path.endswith("data_batch_3"))
    with pytest.raises(DataError) as err:
        cifar10(True, root=root, source="cifar10")
    msg = str(err.value)
    assert "incomplete or damaged" in msg and "cifar-10-batches-py" in msg
    assert "delete that folder" in msg and "extract cifar-10-python.tar.gz" in msg
    assert no_download  # a fresh copy was tried first (it would also re-extract an intact archive)


def test_an_unreadable_file_is_a_permission_error(fake_cifar10_root, no_download, monkeypatch):
    root, _ = fake_cifar10_root

    def unreadable(path, md5=None):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(tv_cifar, "check_integrity", unreadable)
    with pytest.raises(DataError, match=r"cannot read '.*data_batch_1': permission denied"):
        cifar10(True, root=root, source="cifar10")
    assert no_download == []


def test_an_unreadable_folder_is_a_permission_error(fake_cifar10_root, no_download, monkeypatch, capsys):
    root, _ = fake_cifar10_root
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: "cifar-10-batches-py" not in str(path)
                        and real_access(path, mode))
    with pytest.raises(DataError, match=r"cannot read '.*cifar-10-batches-py': permission denied"):
        cifar10(True, root=root, source="cifar10")
    ds = cifar10(True, root=root, source="auto", limit=3)  # auto says why, then uses the stand-in
    assert is_synthetic(ds)
    assert "permission denied" in capsys.readouterr().err
    assert no_download == []


def test_cifar10_on_disk_checks_every_file_by_name(fake_cifar10_root, tmp_path):
    root, _ = fake_cifar10_root
    assert cifar10_on_disk(root)
    os.remove(os.path.join(root, "cifar-10-batches-py", "test_batch"))
    assert not cifar10_on_disk(root)
    assert not cifar10_on_disk(str(tmp_path / "nowhere"))


# --- learnable: the course's recipe learns it in one epoch --------------------------------------

@pytest.mark.slow
def test_tudui_learns_synthetic_data_in_one_epoch():
    # The shuffle order decides how far one epoch gets: course_setup seeds and draws in a fixed order.
    model, train_loader, test_loader, loss_fn, optimizer = course_setup(5000, 1000)
    tudui.train_one_epoch(model, train_loader, loss_fn, optimizer, "cpu", progress=False)
    after = tudui.evaluate(model, test_loader, loss_fn, "cpu", progress=False)
    assert after["accuracy"] >= 0.90
    assert after["loss"] < np.log(10)  # below chance level's cross-entropy


# --- loaders ------------------------------------------------------------------------------------

@pytest.fixture
def two_sets():
    return cifar10(True, source="synthetic", limit=40), cifar10(False, source="synthetic", limit=20)


def test_loaders_on_cpu_do_not_pin(two_sets):
    train, test = loaders(*two_sets, batch_size=8, device="cpu", num_workers=0, seed=3)
    assert train.pin_memory is False and test.pin_memory is False
    assert train.batch_size == test.batch_size == 8
    assert isinstance(train.sampler, DistributedSampler)  # train shuffles, by (seed, epoch)
    assert (train.sampler.num_replicas, train.sampler.shuffle, train.sampler.seed) == (1, True, 3)
    assert isinstance(test.sampler, SequentialSampler)  # test does not
    assert train.dataset is two_sets[0] and test.dataset is two_sets[1]
    imgs, targets = next(iter(train))
    assert imgs.shape == (8, 3, 32, 32) and targets.shape == (8,)


@pytest.mark.parametrize("device", ["cuda", torch.device("cuda", 0), "cuda:1"])
def test_loaders_for_cuda_pin_memory(two_sets, device):
    train, test = loaders(*two_sets, device=device, num_workers=0)  # building them needs no GPU
    assert train.pin_memory is True and test.pin_memory is True


def test_loaders_without_shuffle(two_sets):
    train, _ = loaders(*two_sets, num_workers=0, shuffle=False)
    assert list(train.sampler) == list(range(40))


def test_loaders_draw_nothing_from_the_global_rng(two_sets):
    """The order comes from (seed, epoch), worker seeds from the loader's own generator."""
    train, _ = loaders(*two_sets, batch_size=8, num_workers=0, seed=1)
    train.sampler.set_epoch(2)
    torch.manual_seed(0)
    first = [t.tolist() for _, t in train]
    state = torch.get_rng_state()
    train.sampler.set_epoch(2)
    torch.manual_seed(99)
    assert [t.tolist() for _, t in train] == first
    torch.manual_seed(0)
    _ = [t for _, t in train]
    assert torch.equal(torch.get_rng_state(), state)
    train.sampler.set_epoch(3)
    assert [t.tolist() for _, t in train] != first


def test_the_order_of_an_epoch_is_set_by_set_epoch_alone(two_sets):
    """A loop of one's own calls set_epoch(epoch), as fit and torch's DistributedSampler docs do: without it
    every pass repeats the order; with it, epoch k has the same order in any run (how a resume catches up)."""
    train, _ = loaders(*two_sets, batch_size=8, num_workers=0, seed=1)
    passes = [[t.tolist() for _, t in train] for _ in range(2)]
    assert passes[0] == passes[1]
    orders = []
    for epoch in (1, 2):
        train.sampler.set_epoch(epoch)
        orders.append([t.tolist() for _, t in train])
    assert orders[0] != orders[1]
    again, _ = loaders(*two_sets, batch_size=8, num_workers=0, seed=1)
    again.sampler.set_epoch(2)
    assert [t.tolist() for _, t in again] == orders[1]


def test_distributed_loaders_read_this_process_share(two_sets, monkeypatch):
    monkeypatch.setattr(dist, "is_available", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 4)
    monkeypatch.setattr(dist, "get_rank", lambda group=None: 1)
    train, test = loaders(*two_sets, num_workers=0, distributed=True, seed=5)
    for sampler, shuffled in ((train.sampler, True), (test.sampler, False)):
        assert isinstance(sampler, DistributedSampler)
        assert (sampler.num_replicas, sampler.rank, sampler.shuffle) == (4, 1, shuffled)
    assert train.sampler.seed == 5 and len(train.sampler) == 10 and len(test.sampler) == 5


@pytest.fixture
def cores(monkeypatch):
    """``cores(n)``: this machine has n cores for us, and no torchrun processes share them."""
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    return lambda n: monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)), raising=False)


@pytest.mark.parametrize("n, workers", [(1, 0), (2, 0), (3, 2), (8, 4), (64, 4)])
def test_workers_suit_the_cores(cores, two_sets, n, workers):
    cores(n)
    assert default_num_workers() == workers
    train, test = loaders(*two_sets)
    assert train.num_workers == test.num_workers == workers
    assert train.persistent_workers == (workers > 0)


@pytest.mark.parametrize("n, processes, workers", [(16, 8, 0), (16, 4, 3), (64, 8, 4), (2, 2, 0)])
def test_torchrun_processes_share_the_cores(cores, monkeypatch, n, processes, workers):
    cores(n)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(processes))
    assert default_num_workers() == workers


def test_no_workers_on_windows(cores, monkeypatch):
    cores(16)
    monkeypatch.setattr(os, "name", "nt")
    workers = default_num_workers()
    monkeypatch.undo()
    assert workers == 0


def test_workers_without_sched_getaffinity(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert default_num_workers() == 0
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert default_num_workers() == 0


def test_explicit_num_workers_wins(cores, two_sets):
    cores(2)
    train, _ = loaders(*two_sets, num_workers=1)
    assert train.num_workers == 1 and train.persistent_workers
