"""A pytest plugin for the GPU check: a skipped test fails the run (on a GPU, a test marked gpu that
skips did not check anything). Load it with ``python -m pytest -p tools.no_skips`` (the project's root on sys.path)."""
import pytest

SKIPPED = []


def pytest_runtest_logreport(report):
    if report.skipped:
        SKIPPED.append(report.nodeid)


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker: its controller decides
        return
    if SKIPPED and exitstatus == 0:
        print(f"\nno_skips: {len(SKIPPED)} test(s) skipped, which fails this run: {', '.join(SKIPPED)}")
        session.exitstatus = 1
