"""``python -m benchmarks``: run every benchmark group (or the ones named) and report.

For each group ``benchmarks/bench_<group>.py``: import it (a missing optional
package skips the group with a pip hint), enter its ``setup`` if it has one,
then for every workload warm up and repeat both sides, alternating them, and
keep each side's median and spread. Results go to ``<out>/<group>.json`` and
``<out>/<group>.png``; the report (``RESULTS.md``) is regenerated from every
JSON file in ``<out>``, so running one group keeps the others' last figures.

Exit status: 0 when every workload ran, 1 when any failed, 2 on bad arguments.
A missed goal is reported, not an error: speed is never a test failure.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import math
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from tqdm import tqdm

from benchmarks import machine, report, spark
from benchmarks.framework import Figure, Measure, Workload

logger = logging.getLogger("benchmarks")

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results"
DEFAULT_REPORT = HERE / "RESULTS.md"
# A smoke run must never overwrite the figures of a real one.
QUICK_OUT = Path(tempfile.gettempdir()) / "firesteel-benchmarks-quick"

# Import names whose distribution is spelled differently on PyPI or lives in this repo.
_DISTRIBUTIONS = {
    "confluent_kafka": "confluent-kafka",
    "kafka": "kafka-python",
    "cassandra": "cassandra-driver",
}


def discover() -> list[str]:
    """Group names, from the ``bench_<group>.py`` modules beside this file, sorted."""
    return sorted(path.stem.removeprefix("bench_") for path in HERE.glob("bench_*.py"))


def describe(group: str, out: Path = DEFAULT_OUT) -> str:
    """One line for ``--list``: what the group compares (its module's first docstring line)
    and how long its last full run took, read without importing the group."""
    import ast
    import json

    module = ast.parse((HERE / f"bench_{group}.py").read_text(encoding="utf-8"))
    summary = (ast.get_docstring(module) or "").split("\n")[0].replace("``", "")
    last = out / f"{group}.json"
    took = "not run yet"
    if last.is_file():
        seconds = json.loads(last.read_text(encoding="utf-8")).get("seconds")
        took = f"last full run {seconds / 60:.0f} min" if seconds else took
    return f"{group:12} {summary} ({took})"


def install_hint(exc: ModuleNotFoundError) -> str:
    """``Package `x` is missing: run pip install ...`` for a failed import."""
    missing = exc.name or str(exc)
    if missing.startswith("firesteel."):
        leaf = missing.split(".")[1]
        folder = HERE.parent / "connectors" / leaf
        target = f"-e ./connectors/{leaf}" if (folder / "pyproject.toml").exists() else "-e ."
        return f"Package `{missing}` is missing: run `pip install {target}` to fix it"
    top = missing.split(".")[0]
    distribution = _DISTRIBUTIONS.get(top, top)
    return f"Package `{missing}` is missing: run `pip install {distribution}` to fix it"


def stats(samples: Sequence[float]) -> dict[str, Any]:
    """Median, min, max and inter-quartile range of one side's repetitions."""
    ordered = sorted(samples)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {
        "median": statistics.median(ordered),
        "min": ordered[0],
        "max": ordered[-1],
        "q1": q1,
        "q3": q3,
        "samples": list(samples),
    }


class _Side:
    """The samples one side of a workload produced, headline and extra figures."""

    def __init__(self, measure: Measure) -> None:
        self.measure = measure
        self.values: list[float] = []
        self.extra: dict[str, list[float]] = {}
        self.notes: list[str] = []

    def run(self, keep: bool) -> None:
        result = self.measure()
        figure = result if isinstance(result, Figure) else Figure(float(result))
        if keep:
            self.values.append(float(figure.value))
            for key, value in figure.extra.items():
                self.extra.setdefault(key, []).append(float(value))
            if figure.note and figure.note not in self.notes:
                self.notes.append(figure.note)

    def summary(self) -> dict[str, Any]:
        out = stats(self.values)
        out["extra"] = {key: stats(values) for key, values in self.extra.items()}
        if self.notes:
            out["notes"] = self.notes
        return out


def verdict(ratio: float | None, workload: Workload) -> str:
    """``pass``, ``miss`` or ``-`` (no goal, or no ratio)."""
    if ratio is None or workload.goal is None:
        return "-"
    met = ratio <= workload.goal if workload.lower_is_better else ratio >= workload.goal
    return "pass" if met else "miss"


def _describe(workload: Workload) -> dict[str, Any]:
    return {
        "name": workload.name,
        "unit": workload.unit,
        "baseline_name": workload.baseline_name,
        "goal": workload.goal,
        "issue": workload.issue,
        "lower_is_better": workload.lower_is_better,
        "repetitions": workload.repetitions,
        "warmup": workload.warmup,
    }


def run_workload(workload: Workload, progress: bool) -> dict[str, Any]:
    """Warm up and repeat both sides of ``workload``; never raises for its failures."""
    entry = _describe(workload)
    sides = {"firesteel": _Side(workload.firesteel), "baseline": _Side(workload.baseline)}
    rounds = workload.warmup + workload.repetitions
    started = time.perf_counter()
    load_before = machine.load()
    bar = tqdm(
        total=rounds * 2,
        desc=f"{workload.group}: {workload.name}",
        file=sys.stderr,
        disable=None if progress else True,  # None: only on a terminal
        leave=False,
        unit="run",
    )
    try:
        with ExitStack() as stack:
            if workload.setup is not None:
                bar.set_postfix_str("setup")
                stack.enter_context(workload.setup())
            for index in range(rounds):
                keep = index >= workload.warmup
                for label, side in sides.items():
                    bar.set_postfix_str(f"{label} {'run' if keep else 'warm-up'}")
                    side.run(keep)
                    bar.update()
    except Exception as exc:  # a failing workload is reported; the others still run
        logger.error("benchmark %s / %s failed", workload.group, workload.name, exc_info=True)
        entry.update(
            status="error",
            error=f"{type(exc).__name__}: {exc}",
            traceback=traceback.format_exc(),
        )
        return entry
    finally:
        bar.close()
    firesteel, baseline = sides["firesteel"].summary(), sides["baseline"].summary()
    ratio = firesteel["median"] / baseline["median"] if baseline["median"] else math.inf
    finite = math.isfinite(ratio)
    # A reported-only figure may well be 0 on the baseline's side (restarts, failures): no
    # ratio then, but nothing failed. With a goal, no ratio means no verdict: an error.
    judged = workload.goal is not None
    entry.update(
        status="ok" if finite or not judged else "error",
        firesteel=firesteel,
        baseline=baseline,
        ratio=ratio if finite else None,
        verdict=verdict(ratio if finite else None, workload),
        seconds=round(time.perf_counter() - started, 1),
        load=[load_before, machine.load()],
    )
    if not finite:
        entry["error" if judged else "note"] = f"baseline median is {baseline['median']}: no ratio"
    return entry


@contextmanager
def _group_setup(module: Any, quick: bool) -> Iterator[None]:
    setup = getattr(module, "setup", None)
    if setup is None:
        yield
        return
    with setup(quick):
        yield


def run_group(
    group: str,
    quick: bool,
    progress: bool,
    only: Sequence[str] = (),
    save: Callable[[dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run the workloads of ``benchmarks/bench_<group>.py``; the group's JSON document.

    ``only``: run just the workloads whose name or baseline contains one of these
    texts (the document lists them under ``"only"``, so a partial run says so).
    ``save``: called with the document (status ``running``) after each workload, so
    an interrupted long group keeps the workloads it finished.
    """
    from firesteel.core.errors import MissingDependencyError

    result: dict[str, Any] = {
        "group": group,
        "quick": quick,
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": machine.describe(),
        "workloads": [],
    }
    started = time.perf_counter()
    try:
        module = importlib.import_module(f"benchmarks.bench_{group}")
        workloads: list[Workload] = module.workloads(quick)
        if only:
            workloads = [
                w for w in workloads if any(t in f"{w.name} {w.baseline_name}" for t in only)
            ]
            result["only"] = list(only)
    except MissingDependencyError as exc:
        return {**result, "status": "skipped", "reason": str(exc)}
    except ModuleNotFoundError as exc:
        return {**result, "status": "skipped", "reason": install_hint(exc)}
    try:
        with _group_setup(module, quick):
            for workload in workloads:
                result["workloads"].append(run_workload(workload, progress))
                if save is not None:
                    save({**result, "status": "running"})
    except Exception as exc:  # the group's service failed: report it, run the other groups
        logger.error("benchmark group %s: setup failed", group, exc_info=True)
        return {**result, "status": "error", "reason": f"setup: {type(exc).__name__}: {exc}"}
    failed = any(w["status"] != "ok" for w in result["workloads"])
    result["finished"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    result["seconds"] = round(time.perf_counter() - started, 1)
    result["status"] = "error" if failed or not workloads else "ok"
    if not workloads:
        result["reason"] = "the module declared no workloads"
    return result


def _parser(groups: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Run firesteel benchmarks beside their raw-library baselines.",
    )
    parser.add_argument(
        "groups", nargs="*", metavar="GROUP", help=f"groups to run (default: all of {groups})"
    )
    parser.add_argument("--quick", action="store_true", help="small data, for a smoke run")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help=f"directory for <group>.json and <group>.png (default: {DEFAULT_OUT}; "
        f"with --quick: {QUICK_OUT})",
    )
    parser.add_argument(
        "--report",
        type=Path,
        default=None,
        help="RESULTS.md to regenerate (default: benchmarks/RESULTS.md, or DIR/RESULTS.md "
        "with --out DIR)",
    )
    parser.add_argument(
        "--regenerate",
        action="store_true",
        help="run nothing: redraw the charts and RESULTS.md from the JSON in --out",
    )
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="TEXT",
        help="run only workloads whose name or baseline contains TEXT (repeatable); they replace "
        "their earlier figures in the group's stored results, the others are kept and the "
        "report says what was re-run when",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    parser.add_argument("--list", action="store_true", help="list the groups and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="log firesteel at INFO")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m benchmarks``; returns the exit status."""
    available = discover()
    args = _parser(available).parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    if args.list:
        print("\n".join(describe(group) for group in available))
        return 0
    unknown = sorted(set(args.groups) - set(available))
    if unknown:
        print(f"unknown benchmark group(s) {unknown}; available: {available}", file=sys.stderr)
        return 2
    selected = args.groups or available
    out: Path = args.out or (QUICK_OUT if args.quick else DEFAULT_OUT)
    default_report = DEFAULT_REPORT if out == DEFAULT_OUT else out / "RESULTS.md"
    report_path: Path = args.report or default_report
    out.mkdir(parents=True, exist_ok=True)
    if args.regenerate:
        for result in report.load(out):
            report.chart(result, out / f"{result['group']}.png")
        report.write_report(out, report_path)
        print(f"regenerated {report_path} and the charts in {out}")
        return 0

    print(f"machine: {machine.summary(machine.describe())}")
    mode = "quick" if args.quick else "full"
    print(f"running {mode} benchmarks: {', '.join(selected)}", flush=True)
    results = []
    running: dict[str, Any] = {}
    stored = {group: report.read_group(out, group) for group in selected} if args.only else {}

    def kept(result: dict[str, Any]) -> dict[str, Any]:
        """A partial run (``--only``) keeps the group's other stored workloads."""
        if not args.only:
            return result
        return report.with_rerun(stored[result["group"]], result)

    def save(partial: dict[str, Any]) -> None:
        # The JSON only: a chart has a panel per workload, and drawing it again after
        # each one cost a quick run of 22 workloads a minute (253 panels for 22).
        running["result"] = partial
        report.write_json(kept(partial), out)

    try:
        groups = tqdm(
            selected, desc="groups", file=sys.stderr, disable=True if args.no_progress else None
        )
        for group in groups:
            running.clear()
            result = run_group(
                group, args.quick, progress=not args.no_progress, only=args.only, save=save
            )
            report.write_group(kept(result), out)
            results.append(result)
            print(report.table([result]), flush=True)
            print(f"{group}: {result.get('seconds', 0):.0f} s\n", flush=True)
    except KeyboardInterrupt:
        # Ctrl-C keeps what was measured: the running group's finished workloads, marked.
        partial = running.get("result")
        if partial is not None:
            partial["status"] = "interrupted"
            report.write_group(kept(partial), out)
            results.append(partial)
        report.write_report(out, report_path)
        if results:
            print(f"\ninterrupted; measured so far:\n{report.table(results)}")
        return 130
    finally:
        spark.stop()
    report.write_report(out, report_path)
    if len(results) > 1:
        print(f"\nall groups:\n{report.table(results)}")
    print(f"\nresults: {out}/<group>.json, charts: {out}/<group>.png, report: {report_path}")
    return 0 if all(r["status"] in ("ok", "skipped") for r in results) else 1
