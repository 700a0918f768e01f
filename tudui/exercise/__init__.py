"""Checked exercises: ``ex = tudui.exercises("03")``, then ``ex.q1.check()``, ``ex.q1.hint()``, ``ex.q1.solution()``.

A lesson's texts live in ``tudui/exercise/NN.json`` ({"en": {...}, "zh": {...}}, the same questions in both); its
checks in ``tudui/exercise/checks.py``. A check reads the names a question asks for from the caller's globals (the
notebook) or from keyword arguments, runs the learner's code (on the pretend GPU where the question is about
devices) and returns an :class:`Outcome`. Feedback shows as Markdown in Jupyter, Colab, Kaggle and VS Code, and as
plain text anywhere else."""
import json
import re
import sys
from importlib import resources

from ..text import language, say


class Blank:
    """The ``____`` a learner replaces with an answer."""

    def __repr__(self):
        return "____"


____ = Blank()


class Outcome(Exception):
    """What a check found: ``kind`` "correct", "unattempted" or "incorrect", and the text key with its fields."""

    def __init__(self, kind, key, **fields):
        super().__init__(key)
        self.kind, self.key, self.fields = kind, key, fields


def is_blank(value) -> bool:
    """True for ``____`` itself, or a function whose code still uses it."""
    code = getattr(value, "__code__", None)
    return isinstance(value, Blank) or code is not None and "____" in code.co_names


class Feedback:
    """One message: Markdown where a notebook shows it, plain text in its text form (what nbval compares)."""

    def __init__(self, label, body):
        self.label, self.body = label, body

    def _repr_markdown_(self):
        return f"**{self.label}** {self.body}"

    def __repr__(self):
        return re.sub(r"```\w*\n?", "", f"{self.label} {self.body}").replace("`", "")


def show(feedback: Feedback) -> None:
    ipython = sys.modules.get("IPython")
    if ipython and ipython.get_ipython() is not None:
        ipython.display.display(feedback)
    else:
        print(repr(feedback))


class Question:
    def __init__(self, lesson, name, texts, check):
        self.lesson, self.name, self.texts, self._check, self._hints = lesson, name, texts, check, 0

    def _say(self, key, **fields):
        return self.texts.get(key, "").format(**fields) or say(f"exercises.{key}", **fields)

    def check(self, answer=____, **names):
        """Check the answer (multiple choice: ``check("b")``) or the names the question asks for, taken from the
        caller's globals unless given here."""
        caller = sys._getframe(1).f_globals  # the notebook's namespace (not inside the comprehension)
        wanted = {n: names.get(n, caller.get(n, ____)) for n in self.texts.get("names", [])}
        outcome = self.outcome(answer, **wanted)
        body = self._say(outcome.key, **outcome.fields)
        if outcome.kind == "correct":
            body += " " + say("exercises.offer_solution", q=self.name)
        show(Feedback(say(f"exercises.label.{outcome.kind}"), body))

    def outcome(self, answer=____, **wanted) -> Outcome:
        """What :meth:`check` says of this answer, as an :class:`Outcome` (the tests use it)."""
        try:
            missing = next((n for n in self.texts.get("names", []) if is_blank(wanted.get(n, ____))), None)
            if missing or "choices" in self.texts and is_blank(answer):
                raise Outcome("unattempted", "unattempted" if missing else "unattempted_choice", name=missing)
            self._check(answer, self.texts, **wanted)
            return Outcome("correct", "correct")
        except Outcome as outcome:
            return outcome

    def hint(self, n=None):
        """The next hint (or hint ``n``, from 1); the first says how to get another."""
        hints = self.texts["hints"]
        self._hints = min(n or self._hints + 1, len(hints))
        more = say("exercises.more_hints", q=self.name, n=self._hints + 1) if self._hints < len(hints) else ""
        show(Feedback(say("exercises.label.hint", n=self._hints, of=len(hints)), hints[self._hints - 1] + more))

    def solution(self):
        show(Feedback(say("exercises.label.solution"), self.texts["solution"]))


class Lesson:
    def __init__(self, lesson, questions):
        self.lesson, self.questions = lesson, questions

    def __getattr__(self, name):
        try:
            return self.__dict__["questions"][name]
        except KeyError:
            raise AttributeError(say("exercises.no_question", lesson=self.lesson, q=name,
                                     choices=", ".join(self.__dict__.get("questions", {})))) from None

    def __repr__(self):
        return say("exercises.lesson", lesson=self.lesson, questions=", ".join(self.questions))


def texts(lesson: str, lang: str) -> dict:
    path = resources.files(__package__).joinpath(f"{lesson}.json")
    if not path.is_file():
        raise ValueError(say("exercises.no_lesson", lesson=str(lesson)[:20]))
    return json.loads(path.read_text(encoding="utf-8"))[lang]


def exercises(lesson: str) -> Lesson:
    """The questions of ``lesson`` ("01" ... "08") in the language in force; puts ``____`` into the caller's
    globals, so that a starting cell runs before it is filled in."""
    from . import checks
    sys._getframe(1).f_globals.setdefault("____", ____)
    table = texts(lesson, language())
    return Lesson(lesson, {q: Question(lesson, q, t, getattr(checks, f"l{lesson}_{q}", checks.choice))
                           for q, t in table.items()})
