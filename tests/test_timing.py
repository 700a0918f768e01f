"""tudui.timing: measure and Stopwatch wait for the device, see the work, and report median and best."""
import time

import pytest
import torch

from tudui import timing
from tudui.timing import Stopwatch, Timing, interleaved, measure, speed_ratio


def test_measure_runs_warmup_untimed_then_times_each_repeat():
    calls = []
    t = measure(lambda: calls.append(1), "cpu", repeat=4, warmup=2)
    assert len(calls) == 6  # 2 untimed + 4 timed
    assert len(t.times) == 4
    assert "median of 4" in str(t)


def test_measure_reports_each_call_its_median_and_best(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(time, "perf_counter", lambda: clock[0])
    durations = iter([5.0, 0.25, 3.0, 1.0, 2.0, 4.0])  # the first is the untimed warm-up

    def work():
        clock[0] += next(durations)

    t = measure(work, "cpu", repeat=5, warmup=1)
    assert t.times == [0.25, 3.0, 1.0, 2.0, 4.0]
    assert (t.median, t.best) == (2.0, 0.25)
    assert str(t) == "2000.00 ms (median of 5)"


def test_measure_sees_the_work():
    naps = iter([0.03, 0.01, 0.02])
    t = measure(lambda: time.sleep(next(naps)), repeat=3, warmup=0)
    assert t.best >= 0.01 and t.median >= 0.02
    assert max(t.times) >= 0.03


def test_measure_synchronizes_around_every_timed_call(monkeypatch):
    events = []
    monkeypatch.setattr(timing, "synchronize", lambda device: events.append(("sync", str(device))))
    measure(lambda: events.append("work"), "cuda:1", repeat=2, warmup=1)
    sync = ("sync", "cuda:1")
    assert events == ["work", sync, "work", sync, sync, "work", sync]


@pytest.mark.parametrize("repeat, warmup, says", [(0, 1, "repeat=0 is out of range: it must be at least 1"),
                                                   (3, -1, "warmup=-1 is out of range: it must be at least 0")])
def test_measure_refuses_nothing_to_time(repeat, warmup, says):
    with pytest.raises(ValueError, match=f"^{says}$"):
        measure(lambda: None, repeat=repeat, warmup=warmup)


@pytest.mark.parametrize("kwargs, error, says", [
    ({"fn": None}, TypeError, "^fn must be Callable, not NoneType$"),
    ({"repeat": 2.0}, TypeError, r"^repeat must be a whole number \(int\), not float$"),
    ({"repeat": True}, TypeError, "^repeat must be a whole number"),
])
def test_measure_names_a_wrong_argument(kwargs, error, says):
    with pytest.raises(error, match=says):
        measure(**{"fn": lambda: None, **kwargs})


def test_timing_median_and_best():
    t = Timing([0.3, 0.1, 0.2, 5.0])  # one interrupted run does not move the median much
    assert t.median == 0.25 and t.best == 0.1
    assert str(t) == "250.00 ms (median of 4)"


def test_stopwatch_measures_and_lets_errors_through():
    with Stopwatch("cpu") as sw:
        time.sleep(0.02)
    assert 0.02 <= sw.seconds < 5
    with pytest.raises(ValueError, match="not swallowed"):
        with Stopwatch() as failed:
            time.sleep(0.01)
            raise ValueError("not swallowed")
    assert failed.seconds >= 0.01


@pytest.mark.gpu
def test_timing_on_gpu_waits_for_the_kernels():
    x = torch.rand(4096, 4096, device="cuda")
    x @ x
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with Stopwatch("cuda") as sw:
        start.record()
        for _ in range(20):
            x @ x
        end.record()
    gpu_seconds = start.elapsed_time(end) / 1e3  # what the GPU itself spent
    assert sw.seconds >= 0.9 * gpu_seconds > 0
    t = measure(lambda: [x @ x for _ in range(20)], "cuda", repeat=3, warmup=1)
    assert t.median >= 0.5 * gpu_seconds


def test_interleaved_takes_turns_and_speed_ratio_pairs_rounds():
    calls = []
    seconds = interleaved({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, "cpu",
                          rounds=4, warmup=1)
    assert calls == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]
    assert [len(times) for times in seconds.values()] == [4, 4]
    assert speed_ratio([1.0, 2.0, 1.0], [2.0, 3.0, 4.0]) == 2.0  # median of 2, 1.5, 4 (the medians give 1.5)
    with pytest.raises(ValueError, match="one interleaved"):
        speed_ratio([1.0, 2.0, 1.0], [1.0])
