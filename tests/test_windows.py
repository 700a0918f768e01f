"""Windows, checked here without Windows: nothing in the project uses an API that Windows' Python lacks."""
from check_windows import DEFAULT, ROOT, unix_only_calls


def test_nothing_in_the_project_is_unix_only():
    assert unix_only_calls([ROOT / p for p in DEFAULT]) == []


def test_the_check_finds_unix_only_calls_and_honours_platform_guards(tmp_path):
    code = tmp_path / "unix.py"
    code.write_text("import os, signal, sys\n"
                    "os.pathconf('.', 'PC_NAME_MAX')\n"          # line 2: not on Windows
                    "os.kill(os.getpid(), signal.SIGKILL)\n"     # line 3: os.kill is, SIGKILL is not
                    "if sys.platform != 'win32':\n"
                    "    os.geteuid()\n"                         # guarded: Windows never runs it
                    "def untyped():\n"
                    "    return os.sched_getaffinity(0)\n")      # line 7: inside a function too
    found = unix_only_calls([code])
    assert [line.split(":")[1] for line in found] == ["2", "3", "7"], found
