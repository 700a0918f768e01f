"""The tool: ``python -m tudui doctor | train | predict | rehearse``, with one error boundary (:func:`main`).
Only ``python -m tudui`` and the ``tudui`` script import this package; ``import tudui`` does not. torch is imported
inside the boundary, after what must come first: the language, and a working folder that exists."""
import argparse
import importlib
import json
import math
import os
import platform
import re
import sys
import traceback
from importlib import resources

from .. import __version__, text
from ..text import one_line, say
from .console import UsageError, console

EXIT_USAGE, EXIT_BUG, EXIT_INTERRUPTED = 2, 1, 130
ISSUES = "https://github.com/tudui-lab/pytorch-cpu-gpu/issues"
# Each command's arguments: argparse's keywords, help texts by key, "type": [kind, low, high] for numbers.
COMMANDS = json.loads(resources.files(__package__).joinpath("commands.json").read_text(encoding="utf-8"))


class Parser(argparse.ArgumentParser):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, allow_abbrev=False, add_help=False, **kwargs)  # --check is not --checkpoint
        self._positionals.title, self._optionals.title = say("cli.help.positionals"), say("cli.help.options")
        self.add_argument("-h", "--help", action="help", help=say("cli.help.help"))  # in the language in force
        # "-inf", "-1e-3" and "-nan" are values (refused by range), not options
        self._negative_number_matcher = re.compile(r"^-(\d+\.?\d*|\.\d+)(e[-+]?\d+)?$|^-(inf(inity)?|nan)$", re.I)

    def error(self, message):
        raise UsageError(say("cli.usage", message=message, prog=self.prog))


def _number(kind, low, high):
    """An argparse type: a finite ``kind`` ("int" or "float") in [low, high]."""
    kind = {"int": int, "float": float}[kind]

    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(say("cli.not_whole" if kind is int else "cli.not_a_number",
                                                 text=text[:40])) from None
        if not (math.isfinite(value) and low <= value <= high):
            raise argparse.ArgumentTypeError(say("cli.out_of_range", low=low, high=high, text=text[:40]))
        return value
    return parse


def build_parser():
    import torch
    p = Parser(prog="python -m tudui", description=say("cli.help.description"))
    p.add_argument("--version", action="version", help=say("cli.help.version"), version=say(
        "cli.version", version=__version__, torch=torch.__version__, python=platform.python_version()))
    sub = p.add_subparsers(dest="command", required=True, parser_class=Parser)
    for parser in [p] + [_command(sub, name, command) for name, command in COMMANDS.items()]:
        # on every command, and before it: python -m tudui --lang zh train
        parser.add_argument("--lang", choices=text.LANGS, default=text.language(), help=say("cli.help.lang"))
    return p


def _command(sub, name, command):
    """The parser of command ``name``, with its arguments from COMMANDS."""
    parser = sub.add_parser(name, help=say(command["help"]))
    for argument, spec in command["arguments"].items():
        spec = {**spec, "help": say(spec["help"])}
        parser.add_argument(argument, **{**spec, "type": _number(*spec["type"])} if "type" in spec else spec)
    return parser


def _run(args) -> int | None:
    from . import doctor, prediction, rehearse, training
    return {"doctor": lambda a: doctor.run(lang=a.lang), "train": training.train,
            "predict": prediction.predict, "rehearse": rehearse.run}[args.command](args)


def _language(argv) -> str:
    """--lang's value if it is one (argparse refuses others later), else the setting in force."""
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        value = argv[i + 1] if arg == "--lang" and i + 1 < len(argv) else arg[len("--lang="):] \
            if arg.startswith("--lang=") else None
        if value in text.LANGS:
            return value
    try:
        return text.language()
    except ValueError as exc:  # $TUDUI_LANG=fr: said in English
        text.set_language("en")
        raise UsageError(str(exc)) from None


def _start(argv):
    """What comes before torch: the language of every line from here on; a working folder that still exists
    (torch's oneMKL ends the process on a deleted one with a FATAL ERROR); then torch's import, which fails on
    a bad TORCH_LOGS (or a broken install)."""
    text.set_language(_language(list(sys.argv[1:] if argv is None else argv)))
    try:
        os.getcwd()
    except OSError:
        raise UsageError(say("cli.no_folder")) from None
    try:
        importlib.import_module("torch")
    except Exception as exc:
        raise UsageError(say("cli.torch_failed", reason=one_line(exc))) from None


def _known(exc) -> bool:
    """A refusal the user can act on (exit 2), not a bug."""
    if isinstance(exc, UsageError):
        return True
    if "torch" not in sys.modules:  # it failed before torch: none of the package's errors could be raised
        return False
    from .. import checkpoint, data, device, distributed
    return isinstance(exc, (device.DeviceError, data.DataError, checkpoint.CheckpointError, distributed.LaunchError))


def main(argv=None) -> int:
    """Run one command; every failure ends in one line on stderr and an exit code (2 usage, 1 bug,
    130 Ctrl-C or SIGTERM)."""
    args, chosen = None, list(text._chosen)  # the language in force before, restored after
    with console():
        try:
            _start(argv)
            args = build_parser().parse_args(argv)
            code = _run(args)
        except KeyboardInterrupt:  # a checkpoint there now was saved by this run or was there before: it is whole
            kept = getattr(args, "command", None) == "train" and os.path.isfile(args.checkpoint)
            print(say("cli.interrupted_kept" if kept else "cli.interrupted"), file=sys.stderr)
            return EXIT_INTERRUPTED
        except Exception as exc:
            if _known(exc):
                print(say("cli.error", message=one_line(exc, 300)), file=sys.stderr)
                return EXIT_USAGE
            if os.environ.get("TUDUI_DEBUG") == "1":
                traceback.print_exc()
            print(say("cli.bug", kind=type(exc).__name__, message=one_line(exc), issues=ISSUES), file=sys.stderr)
            return EXIT_BUG
        finally:
            text._chosen[:] = chosen
    return code or 0
