"""Create or update the Chinese twin of a lesson: notebooks/NN-name.ipynb -> notebooks/zh/NN-name.ipynb.

The twin gets the English notebook's cells, in the English order, with the same ids, types and tags:
- a code cell keeps its Chinese comments and printed text (print, show_recorded, a RuntimeError's message)
  where its code is otherwise the English code (see same_code); else the English cell is taken (show_recorded
  calls get lang="zh") and reported;
- a markdown cell keeps its translation (by id); its metadata zh.en_sha is the source_sha of the English
  cell it translates. A new English cell goes in untranslated, without en_sha; a translation whose
  English changed keeps its old en_sha. Both are reported, one line per cell;
- cells the English no longer has are dropped.
Running it again on notebooks in step changes nothing.

Usage: python tools/translate.py [notebooks/NN-name.ipynb ...]      (default: every lesson)
       python tools/translate.py notebooks/NN-name.ipynb --translated ID [ID ...]
           (after translating those markdown cells: record the English they now translate)
"""
from __future__ import annotations

import argparse
import ast
import copy
import io
import sys
import tokenize
from pathlib import Path

from recordings import source_sha
from stamp_notebooks import SETUP_MARK, SETUP_MARK_ZH

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LANG = 'lang="zh"'
# calls that print for the learner: the Chinese edition passes them LANG
LANG_CALLS = ("set_language", "show_recorded", "doctor.run", "doctor.advise", "doctor.describe_build", "doctor.describe_smi")
CLI_LANG = ', "--lang", "zh"'  # and the doctor's command line, [..., "tudui", "doctor"], gets its --lang
# calls whose string arguments are printed text: {name: (first positional argument printed, keywords printed)}
MESSAGE_CALLS = {"print": (0, ()), "show_recorded": (2, ("on_gpu",)), "RuntimeError": (0, ()), "print_advice": (0, ())}
FSTRING_START = getattr(tokenize, "FSTRING_START", None)  # Python 3.12+ splits f-strings into tokens
FSTRING_END = getattr(tokenize, "FSTRING_END", None)
NO_GAP = {tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


# --- the code of a cell, apart from what may be translated -------------------------------------------

def without_magics(source: str) -> str:
    """IPython's `!cmd` and `%magic` lines as plain calls, so that the cell tokenizes as Python."""
    lines = io.StringIO(source).readlines()
    for i, line in enumerate(lines):
        body = line.lstrip()
        if body.startswith(("!", "%")):
            indent, end = line[:len(line) - len(body)], "\n" if line.endswith("\n") else ""
            lines[i] = f"{indent}_magic_({body.rstrip(chr(10))!r}){end}"
    return "".join(lines)


def text_between(lines, start, end) -> str:
    (row1, col1), (row2, col2) = start, end
    if row1 == row2:
        return lines[row1 - 1][col1:col2]
    return lines[row1 - 1][col1:] + "".join(lines[row1:row2 - 1]) + lines[row2 - 1][:col2]


def python_tokens(source: str) -> list:
    """tokenize's tokens, an f-string always as one STRING token (as Python 3.11 gives it)."""
    source = without_magics(source)
    lines = io.StringIO(source).readlines()
    tokens, depth, start = [], 0, None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == FSTRING_START:
            depth, start = depth + 1, start if depth else tok
        elif tok.type == FSTRING_END:
            depth -= 1
            if not depth:
                text = text_between(lines, start.start, tok.end)
                tokens.append(tokenize.TokenInfo(tokenize.STRING, text, start.start, tok.end, start.line))
        elif not depth:
            tokens.append(tok)
    return tokens


def blank_text(string: str) -> str:
    """A printed string literal without its text: its prefix, and the expressions of an f-string
    (in any order: a translation may put them in another order)."""
    prefix = "".join(sorted(string[:min(string.find(q) for q in "'\"" if q in string)].lower()))
    node = ast.parse(string, mode="eval").body
    if isinstance(node, ast.JoinedStr):
        return prefix + repr(sorted(ast.dump(v) for v in node.values if not isinstance(v, ast.Constant)))
    return prefix


def call_name(before) -> str:
    """The dotted name the tokens ``before`` a '(' end in (``tudui.show_recorded``); '' if none."""
    parts = []
    for tok in reversed(before):
        if tok.type == tokenize.NAME and (not parts or parts[-1] == "."):
            parts.append(tok.string)
        elif tok.string == "." and parts and parts[-1] != ".":
            parts.append(".")
        else:
            break
    return "".join(reversed(parts)).lstrip(".")


def printed(frame) -> bool:
    """Whether a string at the top level of this bracket is printed text."""
    name, index, keyword = frame
    for call, (first, keywords) in MESSAGE_CALLS.items():
        if name == call or name.endswith("." + call):
            return keyword in keywords if keyword else index >= first
    return False


def split_code(source: str):
    """(code, texts): the code as (type, text, whitespace before it, line, source text) of each token
    that must be the same in both editions (all but the last two), and the texts that may be translated (comments, printed strings).
    Comments and the lines they stand on are left out of the code, printed strings blanked."""
    try:
        tokens = python_tokens(source)
    except (tokenize.TokenError, SyntaxError) as exc:
        return [("UNPARSED", source, 0, 1, f"a cell tokenize cannot read ({exc})")], []
    code, texts, frames = [], [], []  # frames: [call name, argument index, keyword] of each open bracket
    previous = None
    for i, tok in enumerate(tokens):
        if tok.type == tokenize.COMMENT:
            texts.append(tok.string)
            continue
        if tok.type == tokenize.NL and tok.line.lstrip().startswith("#"):
            continue
        text = tok.string
        if tok.type == tokenize.OP and tok.string in "([{":
            frames.append([call_name(tokens[:i]) if tok.string == "(" else "", 0, None])
        elif tok.type == tokenize.OP and tok.string in ")]}" and frames:
            frames.pop()
        elif tok.string == "," and frames:
            frames[-1][1:] = [frames[-1][1] + 1, None]
        elif tok.type == tokenize.NAME and frames and i + 1 < len(tokens) and tokens[i + 1].string == "=":
            frames[-1][2] = tok.string
        elif tok.type == tokenize.STRING and frames and printed(frames[-1]):
            texts.append(tok.string)
            text = blank_text(tok.string)
        if tok.type in NO_GAP:
            gap = None
        elif previous and previous.end[0] == tok.start[0]:
            gap = tok.start[1] - previous.end[1]
        else:
            gap = tok.start[1]
        code.append((tok.type, text, gap, tok.start[0], tok.string))
        previous = tok
    return code, texts


def doctor_command(tokens, i) -> bool:
    """Whether token i is the "doctor" of a command line ``[..., "tudui", "doctor"]`` without its "--lang"."""
    words = [t.string.strip("'\"") if t.type == tokenize.STRING else t.string for t in tokens[i - 2:i + 3]]
    return i >= 2 and tokens[i].type == tokenize.STRING and words[:3] == ["tudui", ",", "doctor"] \
        and words[3:] != [",", "--lang"]


def with_lang(source: str) -> str:
    """The English code as the Chinese edition has it: LANG passed to each call in LANG_CALLS, CLI_LANG
    added to the doctor's command line."""
    try:
        tokens = python_tokens(source)
    except (tokenize.TokenError, SyntaxError):
        return source
    inserts, frames = [], []  # frames: [a call in LANG_CALLS, has a lang= already] of each open bracket
    for i, tok in enumerate(tokens):
        if doctor_command(tokens, i):
            inserts.append((tok.end, CLI_LANG))
        elif tok.type == tokenize.OP and tok.string in "([{":
            name = call_name(tokens[:i]) if tok.string == "(" else ""
            frames.append([any(name == c or name.endswith("." + c) for c in LANG_CALLS), False])
        elif tok.type == tokenize.NAME and tok.string == "lang" and frames and tokens[i + 1].string == "=":
            frames[-1][1] = True
        elif tok.type == tokenize.OP and tok.string in ")]}" and frames:
            lang_call, has_lang = frames.pop()
            if lang_call and not has_lang:
                before = next(t.string for t in reversed(tokens[:i]) if t.type not in (tokenize.NL, tokenize.COMMENT))
                inserts.append((tok.start, LANG if before == "(" else " " + LANG if before == "," else ", " + LANG))
    lines = io.StringIO(source).readlines()
    for (row, col), insert in reversed(inserts):
        lines[row - 1] = lines[row - 1][:col] + insert + lines[row - 1][col:]
    return "".join(lines)


def same_code(english: str, chinese: str):
    """None when the Chinese cell is the English code (with LANG, see with_lang) apart from comments and
    printed text; else one line saying where they first differ. The setup cell is tools/stamp_notebooks.py's, in
    each edition's language (tests/test_notebooks.py checks that it is stamped as it is)."""
    if english.startswith(SETUP_MARK) and chinese.startswith(SETUP_MARK_ZH):
        return None
    en, zh = split_code(with_lang(english))[0], split_code(chinese)[0]
    for a, b in zip(en, zh):
        if a[:3] != b[:3]:
            return f"English line {a[3]} {a[4]!r} vs Chinese line {b[3]} {b[4]!r}"
    if len(en) != len(zh):
        return f"the {'English' if len(en) > len(zh) else 'Chinese'} cell goes on after the other ends"
    return None


# --- the notebooks -------------------------------------------------------------------------------------

def twin_of(english: Path) -> Path:
    return english.parent / "zh" / english.name


def en_sha(zh_cell):
    """The source_sha of the English cell this markdown cell translates (None: not translated yet)."""
    return zh_cell.metadata.get("zh", {}).get("en_sha")


def carry(cell, twin):
    """The Chinese cell for the English ``cell``, from its Chinese ``twin`` (None: there is none),
    and why it needs a translator (None: it does not)."""
    if cell.cell_type == "markdown" and twin is not None and twin.cell_type == "markdown":
        new = copy.deepcopy(twin)
        new.metadata = copy.deepcopy(cell.metadata)  # the English tags
        if "zh" in twin.metadata:
            new.metadata["zh"] = twin.metadata["zh"]
        if en_sha(twin) is None:
            return new, "not translated yet: translate it, then mark it with --translated"
        if en_sha(twin) != source_sha(cell.source):
            return new, "the English cell changed since it was translated: update it, then mark it with --translated"
        return new, None
    if cell.cell_type == "code" and twin is not None and twin.cell_type == "code" \
            and same_code(cell.source, twin.source) is None:
        new = copy.deepcopy(twin)
        new.metadata = copy.deepcopy(cell.metadata)
        return new, None
    new = copy.deepcopy(cell)
    new.metadata.pop("zh", None)
    if cell.cell_type == "markdown":
        return new, "new: translate it, then mark it with --translated"
    new.source = with_lang(cell.source)
    if not split_code(cell.source)[1]:
        return new, None
    return new, ("new" if twin is None else "the code changed, so the English cell was taken") + \
        ": translate its comments and printed text"


def update(english: Path, chinese: Path = None) -> list:
    """Bring the Chinese twin in step with ``english``; the lines for the translator."""
    import nbformat  # here: the code comparison above needs only the standard library
    if english.resolve().parent.name == "zh":
        raise SystemExit(f"translate: error: {english} is a Chinese notebook; name the English one")
    chinese = chinese or twin_of(english)
    en = nbformat.read(english, as_version=4)
    old = nbformat.read(chinese, as_version=4) if chinese.exists() else None
    twins = {c.get("id"): c for c in old.cells} if old else {}
    nb = copy.deepcopy(old if old else en)
    nb.cells, todo = [], []
    for cell in en.cells:
        if not cell.get("id"):
            raise SystemExit(f"translate: error: {english} has cells without ids; save it with nbformat 4.5 or later")
        new, why = carry(cell, twins.get(cell.id))
        nb.cells.append(new)
        if why:
            todo.append(f"{chinese} cell id {cell.id} ({cell.cell_type}): {why}")
    if nb != old:
        chinese.parent.mkdir(exist_ok=True)
        nbformat.write(nb, chinese)
        todo.append(f"{chinese}: {'updated' if old else 'created'}; "
                    f"re-execute it: python tools/execute_notebooks.py {chinese}")
    return todo


def mark_translated(english: Path, ids, chinese: Path = None) -> list:
    """Record in the Chinese markdown cells ``ids`` the English they translate now."""
    import nbformat
    chinese = chinese or twin_of(english)
    en = {c.get("id"): c for c in nbformat.read(english, as_version=4).cells}
    nb = nbformat.read(chinese, as_version=4)
    zh = {c.get("id"): c for c in nb.cells}
    for cell_id in ids:
        if not (cell_id in zh and cell_id in en and zh[cell_id].cell_type == en[cell_id].cell_type == "markdown"):
            raise SystemExit(f"translate: error: {chinese} has no markdown cell id {cell_id} "
                             "that translates one of the English; run tools/translate.py first")
        zh[cell_id].metadata["zh"] = {"en_sha": source_sha(en[cell_id].source)}
    nbformat.write(nb, chinese)
    return [f"{chinese} cell id {cell_id}: marked as translating the English cell as it is now" for cell_id in ids]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", type=Path, help="English notebooks (default: notebooks/NN-*.ipynb)")
    p.add_argument("--translated", nargs="+", metavar="ID", help="cell ids of one notebook's translated markdown")
    args = p.parse_args(argv)
    if args.translated:
        if len(args.notebooks) != 1:
            p.error("--translated needs exactly one English notebook")
        lines = mark_translated(args.notebooks[0], args.translated)
    else:
        lines = [line for path in args.notebooks or sorted(NOTEBOOKS.glob("[0-9][0-9]-*.ipynb"))
                 for line in update(path)]
    print("\n".join(lines) if lines else "in step: nothing to do")
    return 0


if __name__ == "__main__":
    sys.exit(main())
