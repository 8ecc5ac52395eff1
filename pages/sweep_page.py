"""A results page's measured block from a sweep (`SweepPage`): the block of docs/fashion-mnist.md
(`pages.fashion_mnist`) and of docs/fedacg-fmnist.md (`pages.fedacg_fmnist`).

The block (between `<!-- example:NAME -->` and `<!-- /example:NAME -->`) holds, per setting,
the sweep's table led by the mean accuracy of the last 10 rounds (what one rerun of a cell is
compared with) and the last round's, with the paper's column beside them, the EMA and accuracy
plots, how many of the sweep's cells had finished, the time their ServerApps ran, the code
version they ran on and the machine. Its numbers come from one of three sources:

* the sweep's run folders (`--out-dir`): it then also writes every cell's numbers to the page's
  cells CSV (`reporting.cells`) and every cell's per-round test accuracy to its curves CSV
  (`reporting.curves`), beside the page;
* those two CSVs alone (`--from-csv`): the same table and plots without the run folders;
* both (`--merge`): the committed CSVs' cells and the run folders' (a cell in both is taken
  from its run folder), written back to the CSVs. A sweep too long for one sitting is run in
  parts on one commit (`python -m experiments.sweep FILE --done-in CELLS_CSV` skips the cells
  the CSV holds) and each part merged in: docs/results.md#a-table-in-parts.

Cells of different code versions are refused unless --mixed-versions. The page, its CSVs and
plots are written all or nothing, never through a link, into a docs folder of this user's own
(fileio.folders.trusted_folder); the cells count only from the sweep's own folders; --cells and
--note are written into the page as text (escaped); bad input ends with one line saying what to
do (docs/security.md#run-folders-and-results-read-back). The text around the block (what holds
of the paper's orderings) is written by a person from it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from experiments.sweep_file import slug
from fileio.atomic import write_text_atomic
from fileio.folders import trusted_folder
from fileio.reading import read_text_bounded
from pages.examples import PAGE_LIMIT, ROOT, _number, machine, replace_block
from run_config.collapses import COLLAPSES, replace_page

PAPER_AT = 3  # the paper's column, after Method, Last 10R and Final acc.


class PageError(Exception):
    """The page cannot be made from what was given: the message says what to do."""


@dataclass
class Measured:
    """The block's text, and the CSVs to write beside the page (None: leave them as they are)."""

    text: str
    cells_csv: str | None = None
    curves_csv: str | None = None
    collapses: list | None = None  # run_config.collapses' entries of the page's cells


@dataclass(frozen=True)
class SweepPage:
    """One results page made from one sweep.

    Parameters
    ----------
    module : the page's command (`python -m <module>`).
    sweep_file : the sweep the page reports.
    page : the page (in this repository's docs/); its CSVs and plots are written beside it.
    block : the name of its measured block's markers.
    stem : the prefix of its files: <stem>-cells.csv, <stem>-curves.csv, <stem>-ema-<setting>.png.
    paper_header : the header of the paper's column (None: no such column).
    paper_cell : a set-up's reported row for the method (None: the paper has none) as shown.
    explain : the block's last sentences, after the count of cells: what each column is.
    extra : Markdown put after the tables (heatmaps it draws into the docs folder, the
        paper's orderings), from the sweep, the tabulated cells and the docs folder; None:
        nothing.
    """

    module: str
    sweep_file: Path
    page: Path
    block: str
    stem: str
    paper_header: str | None
    paper_cell: Callable[[list | None], str]
    explain: Callable[[list[int]], str]
    extra: Callable[[Any, list, Path], str] | None = None

    @property
    def cells_name(self) -> str:
        return f"{self.stem}-cells.csv"

    @property
    def curves_name(self) -> str:
        return f"{self.stem}-curves.csv"

    def measured(self, out_dir: Path | None, note: str = "", docs: Path = ROOT / "docs",
                 cells: str = "", from_csv: Path | None = None, mixed_versions: bool = False,
                 merge: bool = False) -> Measured:
        """The block from the sweep's finished cells (`out_dir`), from the cells CSV `from_csv`
        (and the curves CSV beside it), or from both (`merge`: the CSV's cells and the run
        folders', a cell in both from its run folder); only the cells matching `cells` if
        given. Plots are drawn into `docs`. PageError naming what to do."""
        from experiments.sweep import load_sweep

        sweep = load_sweep(self.sweep_file, out_dir=out_dir)
        if cells and not any(fnmatchcase(_name(c), cells) for c in sweep.cells):
            raise PageError(f"--cells {cells!r} matches none of the sweep's cells (e.g. "
                            f"'{_name(sweep.cells[0])}'; python -m experiments.sweep "
                            f"{self._sweep_arg()} --dry-run lists them)")
        every, curves = [], {}
        if from_csv is not None and (from_csv.exists() or from_csv.is_symlink() or not merge):
            every, curves = self._from_csv(sweep, from_csv)  # (--merge: none the first time)
        if from_csv is None or merge:
            ran, ran_curves = self._from_runs(sweep)
            names = {_name(c) for c in ran}
            every = [c for c in every if _name(c) not in names] + ran
            curves.update(ran_curves)
        every = _in_sweep_order(sweep, every)
        chosen = [c for c in every if fnmatchcase(_name(c), cells)] if cells else every
        if not chosen:
            source = from_csv if from_csv is not None and not merge else sweep.dir
            raise PageError(f"no finished cell in {source}" + (
                f" matches --cells {cells!r}" if cells else "") + ": run the sweep first "
                f"(python -m experiments.sweep {self._sweep_arg()} --out-dir "
                f"{sweep.dir.parent}), or give its --out-dir"
                + (" or another pattern" if cells else ""))
        from reporting.cells import versions_problem

        mixed = versions_problem(every, "Run those cells again on one code version, or "
                                        "tabulate them anyway with --mixed-versions")
        if mixed and not mixed_versions:
            raise PageError(mixed)
        rounds, targets = _columns(sweep)
        self._plots(sweep, chosen, curves, docs, targets)
        run = f"`python -m experiments.sweep {self._sweep_arg()} --jobs 2`"
        where = (run if from_csv is None else f"{run}, run in parts and merged into "
                 f"{self.cells_name}" if merge else f"{self.cells_name}, the cells' own CSV")
        extra = self.extra(sweep, chosen, docs).strip() if self.extra is not None else ""
        text = self._text(sweep, chosen, len(every), rounds, targets, where, note, cells,
                          from_csv is None or merge, extra)
        if from_csv is not None and not merge:
            return Measured(text)
        from reporting.cells import cells_csv
        from reporting.curves import curves_csv

        return Measured(text, cells_csv(every, rounds, targets),
                        curves_csv([{**c, "curve": curves.get(_name(c), ([], []))}
                                    for c in every]), self._collapses(sweep, every))

    def _collapses(self, sweep, cells: list) -> list:
        """run_config.collapses' entries of `cells`: each (setting, method) that collapsed on
        every seed, with its resolved config."""
        from feddata.specs import DATASET_BY_NAME
        from run_config import resolve
        from run_config.collapses import entries

        configs, classes = {}, {}
        for cell in sweep.cells:
            if (cell.setting, cell.method) not in configs:
                cfg = resolve(cell.run_config)
                configs[cell.setting, cell.method] = cfg
                spec = DATASET_BY_NAME.get(cfg["dataset"])
                classes[cell.setting, cell.method] = spec.num_classes if spec else 10
        return entries(str(self.page.relative_to(ROOT)), cells, configs, classes)

    def _sweep_arg(self) -> str:
        return str(self.sweep_file.relative_to(ROOT))

    def _from_runs(self, sweep) -> tuple[list, dict]:
        """(reporting.cells' cells, {name: (rounds, test accuracies)}) of the sweep's finished
        cells; it (re)writes the sweep's own table."""
        from experiments.sweep_cells import finished_cells
        from experiments.sweep_report import write_report
        from reporting.metrics import curve

        done = finished_cells(sweep)
        if not done:
            return [], {}
        try:
            report = write_report(sweep, mixed_versions=True)  # (versions: checked after merge)
        except ValueError as err:  # (SweepError)
            raise PageError(str(err)) from None
        curves = {_name(cell): curve(results.get("rounds", []), "test-acc")
                  for cell, results in done}
        return report.cells, curves

    def _from_csv(self, sweep, path: Path) -> tuple[list, dict]:
        """The cells of a cells CSV and the curves of the curves CSV beside it (none where that
        file is missing), each cell one of the sweep file's (setting, method)."""
        from reporting.cells import CellsError, read_cells_csv
        from reporting.curves import read_curves_csv

        try:
            rows, rounds, targets = read_cells_csv(path)
        except FileNotFoundError:
            raise PageError(f"{path} does not exist: give --from-csv a cells CSV (python -m "
                            f"{self.module} --out-dir <the sweep's out-dir> writes "
                            f"{self.cells_name} beside the page)") from None
        except CellsError as err:
            raise PageError(str(err)) from None
        if (rounds, targets) != _columns(sweep):
            raise PageError(f"{path} reports the EMA at rounds {rounds} and targets {targets}, "
                            f"the sweep at {_columns(sweep)[0]} and {_columns(sweep)[1]}: give "
                            "the CSV this page's sweep wrote")
        known = {(c.setting, c.method) for c in sweep.cells}
        foreign = [_name(c) for c in rows if (c["setting"], c["method"]) not in known]
        if foreign:
            raise PageError(f"{path} holds cells of no setting and method of "
                            f"{self._sweep_arg()} ({', '.join(foreign[:5])}): give the cells "
                            "CSV this page's sweep wrote")
        try:
            curves = read_curves_csv(path.parent / self.curves_name)
        except FileNotFoundError:
            curves = {}
        except CellsError as err:
            raise PageError(str(err)) from None
        return rows, curves

    def _plots(self, sweep, chosen: list, curves: dict, docs: Path, targets: list) -> None:
        """<stem>-ema-<setting>.png and <stem>-acc-<setting>.png in `docs`, mean over seeds."""
        from reporting.metrics import ema_series
        from reporting.plots import plot_ema_curves

        for setting in dict.fromkeys(c["setting"] for c in chosen):
            per = {"ema": {}, "acc": {}}
            for c in chosen:
                got = curves.get(_name(c))
                if c["setting"] != setting or not got or not got[0]:
                    continue
                per["acc"].setdefault(c["method"], []).append(got)
                per["ema"].setdefault(c["method"], []).append((got[0], ema_series(got[1])))
            for kind, what in (("ema", "EMA test accuracy"), ("acc", "test accuracy")):
                if per[kind]:
                    plot_ema_curves(per[kind], docs / f"{self.stem}-{kind}-{slug(setting)}.png",
                                    title=f"{sweep.dir.name} / {setting}: {what}",
                                    target_accs=targets,
                                    ylabel=f"{what[0].upper()}{what[1:]} (%)")

    def _text(self, sweep, chosen: list, total: int, rounds: list, targets: list, where: str,
              note: str, cells: str, here: bool, extra: str = "") -> str:
        """Per setting, the table led by Last 10R beside the paper's column, its plots, then
        `extra`, and what the numbers are."""
        from reporting.cells import method_runs
        from reporting.code_version import short_label
        from reporting.table import header, markdown, md_text, table_rows
        from run_config import load_setup

        method_of = {c.method: c.run_config["method"] for c in sweep.cells}
        setup_of = {c.setting: load_setup(c.run_config["setup"]) for c in sweep.cells}
        runs = method_runs(chosen)
        parts = []
        for setting in sweep.settings:
            group = [m for m in runs if m.setting == setting]
            if not group:
                continue
            reported = setup_of[setting]["reported"]["rows"]
            rows = table_rows(group, rounds, targets)
            head = header(rounds, targets)
            if self.paper_header is not None:
                rows = [row[:PAPER_AT] + [self.paper_cell(reported.get(method_of[m.method]))]
                        + row[PAPER_AT:] for m, row in zip(group, rows)]
                head = head[:PAPER_AT] + [self.paper_header] + head[PAPER_AT:]
            stem, name = slug(setting), md_text(setting)
            changed = _changed_by_sweep(setup_of[setting],
                                        [c for c in sweep.cells if c.setting == setting])
            parts.append(f"### {name}: {setup_of[setting]['description']}{md_text(changed)}\n\n"
                         f"{markdown(head, rows)}\n\n"
                         f"![EMA test accuracy per round, {name}]({self.stem}-ema-{stem}.png)\n"
                         f"![test accuracy per round, {name}]({self.stem}-acc-{stem}.png)")
        seconds = sum(_number(c["summary"].get("wall-seconds")) for c in chosen)
        versions = list(dict.fromkeys(c["code-version"] for c in chosen))
        code = (f"code {short_label(versions[0])}" if len(versions) == 1 else
                f"{len(versions)} code versions (" + ", ".join(map(short_label, versions))
                + "), tabulated together with --mixed-versions")
        return ("\n\n".join(parts) + (f"\n\n{extra}" if extra else "")
                + f"\n\nMeasured with {where}: {total} of its {len(sweep.cells)} cells "
                "had finished"
                + (f"; the table holds the {len(chosen)} of them that --cells "
                   f"'{md_text(cells)}' names" if cells else "") + " (the Seeds column); "
                f"their ServerApps ran {seconds / 3600:.1f} hours in all, two at a time, "
                + (f"on {machine()}" if here else "on the machine the CSV's cells ran on")
                + f"{md_text(note)}; the cells ran on {code}. Every cell's numbers (and the "
                f"commit it ran on) are in [{self.cells_name}]({self.cells_name}), its "
                f"accuracy after every round in [{self.curves_name}]({self.curves_name}). "
                + self.explain(rounds))

    def main(self, argv: list[str] | None = None, doc: str = "") -> int:
        parser = argparse.ArgumentParser(prog=f"python -m {self.module}", description=doc,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        parser.add_argument("--out-dir", type=Path, help="the sweep's out-dir, as given to it")
        parser.add_argument("--cells", default="", metavar="PATTERN",
                            help="only the finished cells whose '<setting>/<method>/<seed>' "
                                 "matches (e.g. '*/*/0': seed 0 alone)")
        parser.add_argument("--note", default="", help="appended to the machine "
                            "description, e.g. '; shared with other jobs'")
        source = parser.add_mutually_exclusive_group()
        source.add_argument("--from-csv", nargs="?", const="", metavar="FILE",
                            help="build the table from a cells CSV instead of the run folders "
                                 f"(default FILE: {self.cells_name} in the docs folder)")
        source.add_argument("--merge", action="store_true",
                            help=f"the cells of {self.cells_name} (and its curves) and the "
                                 "run folders' together, written back to the CSVs (a run "
                                 "folder's cell replaces the CSV's)")
        parser.add_argument("--mixed-versions", action="store_true",
                            help="tabulate cells that ran on different code versions (refused "
                                 "by default: the message names the versions and cells)")
        parser.add_argument("--docs", type=Path, default=self.page.parent,
                            help=f"the folder of {self.page.name} and its plots (default: this "
                                 "repository's docs/)")
        args = parser.parse_args(argv)
        from experiments.sweep_file import SweepError

        page = args.docs / self.page.name
        try:
            docs = trusted_folder(args.docs, "the docs folder", make=False)
            text = read_text_bounded(page, PAGE_LIMIT)
            replace_block(text, self.block, "")  # (its markers, before anything is written)
            from_csv = (docs / self.cells_name if args.merge else None) \
                if args.from_csv is None else (
                Path(args.from_csv) if args.from_csv else docs / self.cells_name)
            got = self.measured(args.out_dir, args.note, docs=docs, cells=args.cells,
                                from_csv=from_csv, mixed_versions=args.mixed_versions,
                                merge=args.merge)
            text = replace_block(text, self.block, got.text)
            if got.cells_csv is not None:
                write_text_atomic(docs / self.cells_name, got.cells_csv)
                write_text_atomic(docs / self.curves_name, got.curves_csv)
                # the combinations that collapsed, for run_config check and the ServerApp (a
                # page built outside this repository's docs/ writes them beside itself)
                replace_page(str(self.page.relative_to(ROOT)), got.collapses,
                             None if docs.resolve() == self.page.parent.resolve()
                             else docs / COLLAPSES.name)
            write_text_atomic(page, text)
        except FileNotFoundError as err:
            print(f"error: {err.filename} does not exist: give --docs a folder that holds "
                  f"{self.page.name} (this repository's docs/ does)", file=sys.stderr)
            return 2
        except (PageError, SweepError, OSError) as err:  # UnusableFile: a link, ...
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"wrote {page}" + (f", {docs / self.cells_name} and {self.curves_name}"
                                 if got.cells_csv is not None else ""))
        return 0


def _name(cell: Any) -> str:
    """'<setting>/<method>/<seed>' of a sweep's Cell or of a reporting.cells cell."""
    from reporting.cells import cell_name

    if isinstance(cell, dict):
        return cell_name(cell)
    return cell_name({"setting": cell.setting, "method": cell.method, "seed": cell.seed})


def _changed_by_sweep(setup: dict, cells: list) -> str:
    """What every cell of one setting runs other than its set-up says (its description is the
    heading's, so these are said as overriding it): '; the sweep overrides it with model cnn,
    num-server-rounds 60', '' when nothing. The values the setting's cells share that differ
    from the set-up's run config (the run's output keys aside) and its federation's size."""
    from run_config import KEYS_BY_NAME
    from run_config.coerce import coerce

    shared = dict(cells[0].run_config)
    for cell in cells[1:]:
        shared = {k: v for k, v in shared.items() if cell.run_config.get(k) == v}
    changed = [f"{name} {value}" for name, value in shared.items()
               if name in setup["run-config"] and KEYS_BY_NAME[name].group != "output"
               and coerce(KEYS_BY_NAME[name], value)
               != coerce(KEYS_BY_NAME[name], setup["run-config"][name])]
    size = cells[0].federation_config.get("num-supernodes")
    if size is not None and size != setup["num-supernodes"] and all(
            c.federation_config.get("num-supernodes") == size for c in cells):
        changed.append(f"num-supernodes {size}")
    return f"; the sweep overrides it with {', '.join(changed)}" if changed else ""


def _columns(sweep) -> tuple[list[int], list[float]]:
    """The rounds the table reports the EMA at, and its targets: the sweep file's, or its first
    cell's run config's."""
    from run_config import acc_at_rounds, resolve, target_accs

    cfg = resolve(sweep.cells[0].run_config)
    return (list(sweep.acc_at_rounds or acc_at_rounds(cfg)),
            [float(t) for t in sweep.target_accs or target_accs(cfg)])


def _in_sweep_order(sweep, cells: list) -> list:
    """`cells` in the sweep's order of settings, methods and seeds."""
    order = {_name(c): i for i, c in enumerate(sweep.cells)}
    return sorted(cells, key=lambda c: order.get(_name(c), len(order)))
