"""The package's words in each language (messages, plot labels, the CLI's lines), from ``tudui/text/*.json``, each
``{"en": {key: template}, "zh": {...}}``, a key in one file only. English unless the Chinese lessons call
``tudui.set_language("zh")``, the CLI gets ``--lang`` or ``$TUDUI_LANG`` says otherwise."""
import json
import numbers
import os
from functools import cache
from importlib import resources

LANGS = ("en", "zh")
_chosen = []  # set_language's choice, if any: it wins over $TUDUI_LANG


@cache
def tables() -> dict:
    """{lang: {key: template}} from every file in tudui/text/."""
    merged = {lang: {} for lang in LANGS}
    for entry in sorted(resources.files(__package__).joinpath("text").iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            for lang, table in json.loads(entry.read_text(encoding="utf-8")).items():
                merged[lang].update(table)
    return merged


def check_lang(lang) -> str:
    if lang not in LANGS:
        raise ValueError(f"language must be one of {', '.join(LANGS)}, not {str(lang)[:20]!r}")
    return lang


def set_language(lang: str = "en") -> None:
    """Print, raise and label in ``lang`` ("en" or "zh") from now on, in this process (the Chinese lessons: "zh")."""
    _chosen[:] = [check_lang(lang)]


def language() -> str:
    """The language in force: set_language's, else $TUDUI_LANG's (en or zh), else English."""
    if _chosen:
        return _chosen[0]
    raw = os.environ.get("TUDUI_LANG", "")
    env = raw.strip().lower() or "en"
    if env not in LANGS:
        raise ValueError(f"TUDUI_LANG={raw[:20]!r} is not understood; set it to {' or '.join(LANGS)}, or unset it")
    return env


def say(key: str, lang: str | None = None, **fields) -> str:
    """The text ``key`` in ``lang`` (default: :func:`language`), its ``{fields}`` filled in."""
    return tables()[check_lang(lang or language())][key].format(**fields)


def one_line(message, limit: int = 160) -> str:
    """The first line of ``message`` (an exception, a library's output), printable (control characters, ANSI escapes
    too, as '?') and at most ``limit`` characters long; an error without a message as its type's name."""
    line = next((s.strip() for s in str(message).splitlines() if s.strip()), "")
    line = "".join(c if c.isprintable() else "?" for c in line)
    line = line or (type(message).__name__ if isinstance(message, BaseException) else "")
    return line if len(line) <= limit else line[:limit - 3] + "..."


def checked(kind, low=None, high=None, **named):
    """The last of ``named`` if each is a ``kind`` (a type or tuple of types; ``int``: a whole number, not a bool) from
    ``low`` to ``high``, else a TypeError or ValueError naming it: what torch would only trip over deep in a loop."""
    kinds, whole = kind if isinstance(kind, tuple) else (kind,), kind is int
    for name, value in named.items():
        if isinstance(value, bool) and whole or not isinstance(value, numbers.Integral if whole else kinds):
            wanted = say("args.whole") if whole else say("args.or").join(k.__name__ for k in kinds)
            raise TypeError(say("args.type", name=name, wanted=wanted, kind=type(value).__name__))
        if low is not None and value < low or high is not None and value > high:
            bounds = say("args.at_least", low=low) if high is None else say("args.between", low=low, high=high)
            raise ValueError(say("args.range", name=name, value=str(value)[:40], bounds=bounds))
    return value
