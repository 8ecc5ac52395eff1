"""The papers' comparison table: one row per method, mean +- std over seeds, as Markdown and CSV.

Columns: Last 10R (the mean accuracy of the last 10 rounds, %: the number one rerun of a cell
can be compared with, which a single round's accuracy is not; `reporting.metrics`), Final acc.
(the test accuracy of the last round, %, as GC-Fed's tables report it), Acc.
at R1, Acc. at R2 (EMA test accuracy, %), rounds to X%, rounds to Y% (first round whose EMA
reaches the target), MB sent per round (down + up), number of seeds.
A seed whose training diverged (its summary says `diverged`) is a result, never dropped: the
final accuracy is then the mean of the other seeds with "(k/n failed)", or "Failed (n/n)" when
every seed diverged (the papers write "Failed"); its other columns count the rounds it had.
Rounds to a target: "mean +- std" when every seed reached it; "T+" when none did; when only some
did, the mean counting the others as T, marked "+" (a lower bound) with how many reached it.
Standard deviations are sample standard deviations (n - 1); one seed shows the mean alone.
"""

from __future__ import annotations

import csv
import io
import math
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .metrics import not_reached, round_key


@dataclass
class MethodRuns:
    """Every seed's run summary of one method (in one setting)."""

    method: str
    summaries: list[dict[str, Any]] = field(default_factory=list)
    setting: str = ""


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def _num(x: float) -> str:
    return f"{x:.0f}" if abs(x - round(x)) < 1e-9 else f"{x:.1f}"


def format_acc(values: Sequence[float | None]) -> str:
    """Accuracies (fractions) as 'mean +- std' in percent; '-' when no seed has one."""
    have = [v * 100 for v in values if v is not None]
    if not have:
        return "-"
    mean, std = mean_std(have)
    text = f"{mean:.2f}" if len(have) == 1 else f"{mean:.2f} ± {std:.2f}"
    return text if len(have) == len(values) else f"{text} ({len(have)}/{len(values)})"


def format_final(summaries: Sequence[dict[str, Any]], key: str = "final-test-acc") -> str:
    """The last round's test accuracy (or another accuracy `key` of the summaries) over seeds,
    diverged seeds named (module docstring)."""
    failed = sum(1 for x in summaries if x.get("diverged"))
    if failed == len(summaries):
        return f"Failed ({failed}/{failed})"
    text = format_acc([x.get(key) for x in summaries if not x.get("diverged")])
    return text + (f" ({failed}/{len(summaries)} failed)" if failed else "")


def format_rounds(values: Sequence[int | str], total_rounds: int) -> str:
    """Rounds to a target over seeds: ints where reached, 'T+' strings where not."""
    reached = [v for v in values if isinstance(v, int)]
    if not reached:
        return not_reached(total_rounds)
    if len(reached) == len(values):
        mean, std = mean_std(reached)
        return _num(mean) if len(values) == 1 else f"{_num(mean)} ± {_num(std)}"
    bound = [v if isinstance(v, int) else total_rounds for v in values]
    return f"{_num(sum(bound) / len(bound))}+ ({len(reached)}/{len(values)} reached)"


def header(acc_at_rounds: Sequence[int], target_accs: Sequence[float]) -> list[str]:
    return (["Method", "Last 10R (%)", "Final acc. (%)"]
            + [f"Acc. at {r}R (%)" for r in acc_at_rounds]
            + [f"Rounds to {round_key(t)}%" for t in target_accs] + ["MB per round", "Seeds"])


def table_rows(runs: Sequence[MethodRuns], acc_at_rounds: Sequence[int],
               target_accs: Sequence[float]) -> list[list[str]]:
    rows = []
    for m in runs:
        s = m.summaries
        total = max((x["rounds"] for x in s), default=0)
        cells = [m.method, format_final(s, "last10-acc"), format_final(s)]
        cells += [format_acc([x["acc-at-round"].get(round_key(r)) for x in s])
                  for r in acc_at_rounds]
        cells += [format_rounds([x["rounds-to-acc"][round_key(t)] for x in s], total)
                  for t in target_accs]
        per_round = [x["bytes-total"] / x["rounds"] / 1e6 for x in s if x["rounds"]]
        cells.append(f"{mean_std(per_round)[0]:.3g}" if per_round else "-")
        cells.append(str(len(s)))
        rows.append(cells)
    return rows


MD_MARKS = "\\`*_[]|!~#"  # what Markdown (GitHub's) gives a meaning to inside a line
HTML_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}


def md_text(text: object) -> str:
    """Text from a user (a method's or setting's name, a --cells pattern, a note) as literal
    Markdown on one line, as it reads: Markdown's marks backslash-escaped (no emphasis, code,
    link, table cell break), '<', '>' and '&' as HTML entities (no tag, no script), and a control
    character, line or paragraph separator shown as its escape ('\\n') instead of breaking
    the line."""
    out = []
    for char in str(text):
        if char in HTML_ENTITIES:
            out.append(HTML_ENTITIES[char])
        elif char in MD_MARKS:
            out.append("\\" + char)
        elif unicodedata.category(char) in ("Cc", "Zl", "Zp", "Cs"):
            out.append("\\" + repr(char)[2:-1] if repr(char)[1] == "\\"
                       else f"\\\\u{ord(char):04x}")
        else:
            out.append(char)
    return "".join(out)


def markdown(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub Markdown table; every cell is text (`md_text`: a method's name from a sweep file
    cannot break the table or carry HTML)."""
    lines = ["| " + " | ".join(md_text(h) for h in head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(md_text(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def csv_text(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(head)
    writer.writerows(rows)
    return buf.getvalue()


def comparison(runs: Sequence[MethodRuns], acc_at_rounds: Sequence[int],
               target_accs: Sequence[float]) -> tuple[str, str]:
    """(Markdown, CSV) of the table; with several settings, one Markdown table per setting and a
    'Setting' column in the CSV."""
    head = header(acc_at_rounds, target_accs)
    settings = list(dict.fromkeys(m.setting for m in runs)) or [""]
    with_setting = len(settings) > 1 or bool(settings[0])
    md_parts, csv_rows = [], []
    for setting in settings:
        group = [m for m in runs if m.setting == setting]
        rows = table_rows(group, acc_at_rounds, target_accs)
        md = markdown(head, rows)
        md_parts.append(f"### {md_text(setting)}\n\n{md}" if setting else md)
        csv_rows += [[setting] + r if with_setting else r for r in rows]
    csv_head = ["Setting"] + head if with_setting else head
    return "\n\n".join(md_parts) + "\n", csv_text(csv_head, csv_rows)
