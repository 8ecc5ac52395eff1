"""`MethodStrategy.start` (strategies/round_loop.py) is a copy of Flower's `Strategy.start`
loop, kept because Flower's hooks do not suffice (docs/extending.md#flowers-loop): this test
holds the copy to the installed Flower. It compares the installed `Strategy.start`, normalized
(no docstring, comments, line breaks or trailing commas: one line per statement), with the
lines the copy was made from (tests/flower_strategy_start.txt, flwr 1.41) and fails naming the
lines that changed. After carrying a change of Flower's over to the copy, record the new lines:
`python tests/test_flower_loop.py --record`.
"""

from __future__ import annotations

import ast
import difflib
import inspect
import io
import sys
import textwrap
import tokenize
from pathlib import Path

from flwr.serverapp.strategy import Strategy

RECORDED = Path(__file__).with_name("flower_strategy_start.txt")


def normalized(function) -> list[str]:
    """The statements of `function`'s source, one line each, indented by depth, tokens joined
    by one space: what a change of layout, comments or docstring leaves alone."""
    source = textwrap.dedent(inspect.getsource(function))
    first = ast.parse(source).body[0].body[0]
    docstring = set()
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
        docstring = set(range(first.lineno, first.end_lineno + 1))
    lines, words, depth = [], [], 0
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        kind, text = token.type, token.string
        if kind in (tokenize.INDENT, tokenize.DEDENT):  # (the first is on the docstring's line)
            depth += 1 if kind == tokenize.INDENT else -1
        elif token.start[0] in docstring or kind in (tokenize.COMMENT, tokenize.NL):
            continue
        elif kind in (tokenize.NEWLINE, tokenize.ENDMARKER):
            if words:
                lines.append("    " * depth + " ".join(words))
            words = []
        elif text in ")]}" and words and words[-1] == ",":
            words[-1] = text  # a trailing comma is layout
        else:
            words.append(text)
    return lines


def changes(installed: list[str], recorded: list[str]) -> list[str]:
    """The lines of Flower's loop that differ from the recorded ones (a unified diff)."""
    return list(difflib.unified_diff(recorded, installed, "recorded (flwr 1.41)",
                                     "installed flwr", lineterm="", n=1))


def test_flowers_loop_is_the_one_the_copy_was_made_from():
    diff = changes(normalized(Strategy.start), RECORDED.read_text().splitlines())
    assert not diff, (
        "Flower's Strategy.start (flwr/serverapp/strategy/strategy.py) differs from the loop "
        "that MethodStrategy.start (strategies/round_loop.py) copies: carry the change over to "
        "the copy, then record it (python tests/test_flower_loop.py --record). What changed:\n"
        + "\n".join(diff))


def test_a_changed_line_is_named():
    """The check sees a change of a statement, and no change of layout or comments."""
    def loop(rounds):
        """A docstring."""
        for r in range(1, rounds + 1):  # a comment
            print(r,
                  )

    def relaid(rounds):
        for r in range(1,
                       rounds + 1):
            print(r)

    def changed(rounds):
        for r in range(0, rounds + 1):
            print(r)

    assert normalized(loop)[1:] == normalized(relaid)[1:] == [
        "    for r in range ( 1 , rounds + 1 ) :", "        print ( r )"]
    diff = changes(normalized(changed)[1:], normalized(loop)[1:])
    assert "-    for r in range ( 1 , rounds + 1 ) :" in diff
    assert "+    for r in range ( 0 , rounds + 1 ) :" in diff


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    RECORDED.write_text("\n".join(normalized(Strategy.start)) + "\n")
    print(f"recorded {RECORDED}")
