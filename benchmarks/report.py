"""Reports of benchmark results: console table, JSON, PNG chart, RESULTS.md.

RESULTS.md is regenerated from the JSON files only, never edited by hand, so
the report and the stored figures cannot disagree.
"""

from __future__ import annotations

import json
import math
import os
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import machine
from firesteel.testing.s3 import KINDS

HEADERS = (
    "group",
    "workload",
    "firesteel",
    "baseline",
    "baseline figure",
    "ratio",
    "goal",
    "result",
)


def number(value: float | None) -> str:
    """``12.3M``, ``456k``, ``7.89``: three significant digits and an SI suffix."""
    if value is None or not math.isfinite(value):
        return "-"
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def figure(side: dict[str, Any] | None, unit: str) -> str:
    """``1.2M rows/s [1.1M-1.3M]``: the median and the min-max spread of one side."""
    if not side:
        return "-"
    median = f"{number(side['median'])} {unit}".rstrip()
    return f"{median} [{number(side['min'])}-{number(side['max'])}]"


def short_error(text: str, limit: int = 160) -> str:
    """The first line of an error, cut to ``limit`` characters (the JSON keeps all of it)."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    return first if len(first) <= limit else first[: limit - 3] + "..."


def goal_text(entry: dict[str, Any]) -> str:
    """``>= 0.8x (issue 2)``, or ``-`` for a workload that is reported only."""
    if entry.get("goal") is None:
        return "-"
    sign = "<=" if entry.get("lower_is_better") else ">="
    source = f" ({entry['issue']})" if entry.get("issue") else ""
    return f"{sign} {entry['goal']:g}x{source}"


def ratio_text(entry: dict[str, Any]) -> str:
    """``0.83x``; three significant digits outside [0.1, 10) (``0.00488x``, ``72.6x``)."""
    ratio = entry.get("ratio")
    if ratio is None:
        return "-"
    return f"{ratio:.2f}x" if 0.1 <= ratio < 10 else f"{ratio:.3g}x"


def _rows(results: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for result in results:
        group = result["group"]
        for entry in result["workloads"]:
            unit = entry["unit"]
            if entry["status"] != "ok":
                outcome = f"ERROR {short_error(entry.get('error', ''))}"
            else:
                outcome = entry["verdict"].upper() if entry["verdict"] != "-" else "-"
            rows.append(
                (
                    group,
                    entry["name"],
                    figure(entry.get("firesteel"), unit),
                    entry["baseline_name"],
                    figure(entry.get("baseline"), unit),
                    ratio_text(entry),
                    goal_text(entry),
                    outcome,
                )
            )
    return rows


def table(results: Sequence[dict[str, Any]]) -> str:
    """A plain-text table: one line per workload, medians with [min-max] spread.

    Below it, one line per secondary figure (e.g. MB/s) and per group that was
    skipped or could not start, with its reason.
    """
    rows = [HEADERS, *_rows(results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADERS))]
    lines = [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
        for row in rows
    ]
    lines.insert(1, "  ".join("-" * width for width in widths))
    if len(rows) == 1:
        lines = []
    for result in results:
        for entry in result["workloads"]:
            extra = _extra_lines(entry)
            if extra:
                lines += [f"{result['group']} / {entry['name']}:", *extra]
        if result["status"] != "ok" and not result["workloads"]:
            lines.append(f"{result['group']}: {result['status'].upper()}: {result.get('reason')}")
    return "\n".join(line.rstrip() for line in lines)


def chart(result: dict[str, Any], path: Path) -> None:
    """One panel per workload: firesteel beside its baseline, median bar, min-max whisker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import EngFormatter

    entries = [e for e in result["workloads"] if e["status"] == "ok"]
    panels = max(len(entries), 1)
    height = 2.4 * panels + 0.8
    # Constrained layout gives the figure title, each panel's title and the wrapped side
    # names their own room, so no text lies over another panel.
    fig, axes = plt.subplots(panels, 1, figsize=(9, height), squeeze=False, layout="constrained")
    mode = "quick" if result.get("quick") else "full"
    fig.suptitle(f"firesteel benchmarks: {result['group']} ({mode} run)", fontsize=11)
    if not entries:
        reason = result.get("reason") or "no workload completed"
        axes[0][0].text(0.5, 0.5, f"{result['status']}: {reason}", ha="center", wrap=True)
        axes[0][0].set_axis_off()
    for index, entry in enumerate(entries):
        ax = axes[index][0]
        sides = [("firesteel", entry["firesteel"]), (entry["baseline_name"], entry["baseline"])]
        medians = [side["median"] for _, side in sides]
        errors = [
            [side["median"] - side["min"] for _, side in sides],
            [side["max"] - side["median"] for _, side in sides],
        ]
        ax.barh(
            [textwrap.fill(label, 24) for label, _ in sides],
            medians,
            xerr=errors,
            color=["#d9541e", "#7f7f7f"],
            capsize=4,
        )
        ax.invert_yaxis()
        ax.set_xlabel(entry["unit"])
        ax.xaxis.set_major_formatter(EngFormatter(sep=""))
        verdict = entry["verdict"].upper() if entry["verdict"] != "-" else ""
        goal = f"goal {goal_text(entry)}" if entry.get("goal") is not None else "reported only"
        title = f"{entry['name']}: {ratio_text(entry)} ({goal}) {verdict}"
        ax.set_title(textwrap.fill(title, 90), fontsize=9)
        ax.grid(axis="x", alpha=0.3)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_json(result: dict[str, Any], out: Path) -> None:
    """``<out>/<group>.json`` (``--regenerate`` draws its chart from it)."""
    path = out / f"{result['group']}.json"
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


def write_group(result: dict[str, Any], out: Path) -> None:
    """``<out>/<group>.json`` and ``<out>/<group>.png``."""
    write_json(result, out)
    chart(result, out / f"{result['group']}.png")


def with_rerun(previous: dict[str, Any] | None, rerun: dict[str, Any]) -> dict[str, Any]:
    """The group's stored result ``previous`` with the workloads of the partial run ``rerun``
    (``--only``) in place of those of the same name, new ones after them, and the re-run
    listed under ``reruns`` (when and on what machine); ``rerun`` itself where there is no
    stored result of the same kind (quick or full) to keep."""
    if previous is None or bool(previous.get("quick")) != bool(rerun.get("quick")):
        return rerun
    fresh = {entry["name"]: entry for entry in rerun["workloads"]}
    workloads = [fresh.pop(entry["name"], entry) for entry in previous["workloads"]]
    note = {key: rerun[key] for key in ("started", "only", "machine") if key in rerun}
    merged = {
        **previous,
        "workloads": [*workloads, *fresh.values()],
        "reruns": [*previous.get("reruns", []), note],
    }
    if rerun.get("status") != "ok":
        merged["status"] = rerun.get("status", "error")
    return merged


def read_group(out: Path, group: str) -> dict[str, Any] | None:
    """The result of ``group`` stored in ``out``, if any."""
    path = out / f"{group}.json"
    if not path.exists():
        return None
    document: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return document


def load(out: Path) -> list[dict[str, Any]]:
    """Every group's last result stored in ``out``, by group name."""
    results = []
    for path in sorted(out.glob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(document, dict) and "group" in document and "workloads" in document:
            results.append(document)
    return results


def _extra_lines(entry: dict[str, Any]) -> list[str]:
    """One line per secondary figure: both sides' medians and spread, and their ratio;
    then each side's notes and the machine's load when the workload began and ended."""
    firesteel = (entry.get("firesteel") or {}).get("extra", {})
    baseline = (entry.get("baseline") or {}).get("extra", {})
    lines = []
    for name, side in (("firesteel", "firesteel"), (entry["baseline_name"], "baseline")):
        lines += [f"  - {name}: {note}" for note in (entry.get(side) or {}).get("notes", [])]
    for key in [*firesteel, *(k for k in baseline if k not in firesteel)]:
        ours, theirs = firesteel.get(key), baseline.get(key)
        ratio = ""
        if ours and theirs and theirs["median"]:
            ratio = f" ({ratio_text({'ratio': ours['median'] / theirs['median']})})"
        lines.append(
            f"  - {key}: firesteel {figure(ours, '')}; "
            f"{entry['baseline_name']} {figure(theirs, '')}{ratio}"
        )
    load = entry.get("load")
    if load and None not in load:
        lines.append(f"  - load (1 min average) at start / end: {load[0]:.1f} / {load[1]:.1f}")
    return lines


def markdown(results: Sequence[dict[str, Any]], image_dir: str) -> str:
    """The text of RESULTS.md for ``results``; images are linked under ``image_dir``."""
    out = [
        "# firesteel benchmark results",
        "",
        f"Generated by `python -m benchmarks` from `{image_dir}/<group>.json`; do not edit it.",
        "Each side ran warm-up rounds, then several repetitions alternating with the other",
        "side; figures are medians with the [min-max] spread. The ratio is firesteel / baseline",
        "(higher is better unless the goal says `<=`). How to run, and where the time goes:",
        "`benchmarks/README.md`.",
        "",
    ]
    for result in results:
        mode = "quick (small data, not a measurement)" if result.get("quick") else "full"
        if result.get("only"):
            chosen = ", ".join(f"`{text}`" for text in result["only"])
            mode += f"; only the workloads named with {chosen} (the others did not run)"
        out += [
            f"## {result['group']}",
            "",
            f"Run {result.get('started', '?')}, {mode}.  ",
            f"Machine: {machine.summary(result.get('machine', {}))}",
            "",
        ]
        for rerun in result.get("reruns", []):
            chosen = ", ".join(f"`{text}`" for text in rerun["only"])
            load = rerun.get("machine", {}).get("load_average")
            at = f" at load {load[0]:.1f}" if load else ""
            out += [f"Re-run {rerun['started']}{at}: the workloads named with {chosen}.", ""]
        if result["status"] != "ok" and not result["workloads"]:
            out += [f"**{result['status']}**: {result.get('reason', '')}", ""]
            continue
        out += [
            "| workload | firesteel | baseline | baseline figure | ratio | goal | result |",
            "|---|---|---|---|---|---|---|",
        ]
        for row in _rows([result]):
            cells = [cell.replace("|", "\\|") for cell in row[1:]]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
        for entry in result["workloads"]:
            extra = _extra_lines(entry)
            if extra:
                out += [f"- {entry['name']}:", *extra]
        out += ["", f"![{result['group']}]({image_dir}/{result['group']}.png)", ""]
    return "\n".join(out).rstrip() + "\n"


def requests_markdown(figures: dict[str, Any]) -> str:
    """The section of RESULTS.md for ``requests.json`` (``python -m benchmarks.requests``)."""
    out = [
        "## requests",
        "",
        "S3 requests per micro-batch of each path, counted at the S3 server process",
        "(`python -m benchmarks.requests`): the mean over the first and the last window.",
        "",
        "| path | batches | first window | last window | last window by kind |",
        "|---|---|---|---|---|",
    ]
    for name, entry in sorted(figures.items()):
        last = entry["last"]
        kinds = ", ".join(f"{kind} {last[kind]:.3g}" for kind in KINDS if last[kind])
        out.append(
            f"| {name} | {entry['batches']:,} | {entry['first']['all']:.1f} "
            f"(first {entry['window']}) | {last['all']:.1f} (last {entry['window']}) | {kinds} |"
        )
    return "\n".join(out) + "\n"


def write_report(out: Path, report_path: Path) -> None:
    """Regenerate ``report_path`` from every JSON result in ``out`` (and ``requests.json``)."""
    image_dir = Path(os.path.relpath(out, report_path.parent)).as_posix()
    text = markdown(load(out), image_dir)
    requests = out / "requests.json"
    if requests.exists():
        text += "\n" + requests_markdown(json.loads(requests.read_text(encoding="utf-8")))
    report_path.write_text(text, encoding="utf-8")
