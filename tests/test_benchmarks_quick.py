"""The quick benchmark run: every group runs, reports a finite ratio, and writes its reports.

Never asserts a speed: the figures of a quick run on a shared machine mean nothing.
The run proves the benchmarks' code paths; its Kafka groups run on the test worker's
broker (``FIRESTEEL_KAFKA_BOOTSTRAP``) rather than starting one of their own.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from firesteel.testing.jobs import QUICK_START_JVM
from firesteel.testing.kafka import BOOTSTRAP_ENV

ROOT = Path(__file__).resolve().parent.parent
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_missing_optional_dependency_gets_a_pip_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    # benchmarks/ is a folder of the repository, not an installed package.
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.runner import install_hint

    with pytest.raises(ModuleNotFoundError) as missing:
        importlib.import_module("confluent_kafka.no_such_module_firesteel")
    assert "pip install confluent-kafka" in install_hint(missing.value)


def test_a_partial_rerun_folded_into_a_result_is_named_with_its_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.report import markdown

    rerun = {"started": "2026-11-26T15:09:15+00:00", "only": ["(b)"]}
    result = {"group": "peers", "status": "ok", "workloads": [], "reruns": [rerun]}
    text = markdown([result], "results")
    assert "Re-run 2026-11-26T15:09:15+00:00: the workloads named with `(b)`." in text
    rerun["machine"] = {"load_average": [12.34, 10.0, 9.0]}
    text = markdown([result], "results")
    assert "Re-run 2026-11-26T15:09:15+00:00 at load 12.3: the workloads named with" in text


def test_a_partial_rerun_replaces_its_workloads_and_keeps_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.report import with_rerun

    def entry(name: str, median: float) -> dict[str, object]:
        return {"name": name, "status": "ok", "firesteel": {"median": median}}

    stored = {
        "group": "g",
        "quick": False,
        "started": "2026-11-26T10:00:00+00:00",
        "status": "ok",
        "workloads": [entry("a", 1.0), entry("b", 2.0)],
    }
    rerun = {
        "group": "g",
        "quick": False,
        "started": "2026-11-29T14:00:00+00:00",
        "only": ["b"],
        "machine": {"load_average": [3.0, 2.0, 1.0]},
        "status": "ok",
        "workloads": [entry("b", 5.0), entry("c", 7.0)],
    }
    merged = with_rerun(stored, rerun)
    assert [(w["name"], w["firesteel"]) for w in merged["workloads"]] == [
        ("a", {"median": 1.0}),
        ("b", {"median": 5.0}),
        ("c", {"median": 7.0}),
    ]
    assert merged["started"] == stored["started"] and "only" not in merged
    assert merged["reruns"] == [
        {"started": rerun["started"], "only": ["b"], "machine": rerun["machine"]}
    ]
    assert with_rerun(stored, {**rerun, "status": "error"})["status"] == "error"
    assert with_rerun({**stored, "quick": True}, rerun) is rerun
    assert with_rerun(None, rerun) is rerun


def test_a_zero_baseline_fails_a_judged_workload_and_not_a_reported_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.framework import Workload
    from benchmarks.runner import run_workload

    def restarts(goal: float | None) -> Workload:
        return Workload(
            group="g",
            name="restarts",
            unit="restarts",
            baseline_name="the other mode",
            goal=goal,
            firesteel=lambda: 0.0,
            baseline=lambda: 0.0,
            lower_is_better=True,
            repetitions=1,
            warmup=0,
        )

    reported = run_workload(restarts(None), progress=False)
    assert reported["status"] == "ok" and reported["ratio"] is None, reported
    assert "no ratio" in reported["note"]
    judged = run_workload(restarts(1.0), progress=False)
    assert judged["status"] == "error" and "no ratio" in judged["error"], judged


def _benchmarks(*args: str, bootstrap: str = "") -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    if bootstrap:
        env[BOOTSTRAP_ENV] = bootstrap
    # Every JVM of the run (the session's, the pipeline group's streamlets) starts as the
    # harness's jobs do: the run proves code paths, and C2 never pays back in one.
    env["JAVA_TOOL_OPTIONS"] = QUICK_START_JVM
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=570,
        check=False,
    )


def test_unknown_group_is_refused_with_the_list_of_groups() -> None:
    done = _benchmarks("no_such_group", "--quick")
    assert done.returncode == 2
    assert "no_such_group" in done.stderr and "files" in done.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_quick_run_of_every_benchmark_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bootstrap: str
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks.report import ratio_text

    groups = sorted(p.stem.removeprefix("bench_") for p in (ROOT / "benchmarks").glob("bench_*.py"))
    assert "files" in groups and "peers" in groups, groups
    # The peers group installs Quix Streams and PyFlink into virtual environments of their
    # own (minutes for apache-flink): tests/test_benchmarks_peers.py tests its logic instead.
    groups.remove("peers")
    # The fixedcost group measures job processes, a JVM each (minutes in all):
    # tests/test_benchmarks_fixedcost.py tests its logic instead.
    groups.remove("fixedcost")
    # The windows group's quick run is still four streaming queries of five micro-batches,
    # one of them transformWithStateInPandas (7.6 min at load 25-44 when it was added):
    # tests/test_benchmarks_windows.py tests its reference instead.
    groups.remove("windows")
    done = _benchmarks(
        "--quick", "--no-progress", "--out", str(tmp_path), *groups, bootstrap=bootstrap
    )
    output = f"stdout:\n{done.stdout}\nstderr:\n{done.stderr[-5000:]}"
    assert done.returncode == 0, output

    report = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    for group in groups:
        result = json.loads((tmp_path / f"{group}.json").read_text(encoding="utf-8"))
        # Every optional dependency is installed for development: a skip would hide a group.
        assert result["status"] == "ok", (group, result.get("reason"), output)
        assert result["quick"] is True
        assert result["machine"]["cores"] and result["machine"]["packages"]["pyspark"]
        assert result["workloads"], group
        for workload in result["workloads"]:
            assert workload["status"] == "ok", (group, workload)
            assert math.isfinite(workload["ratio"]) and workload["ratio"] > 0, workload
            for side in ("firesteel", "baseline"):
                assert len(workload[side]["samples"]) == workload["repetitions"]
                assert workload[side]["min"] <= workload[side]["median"] <= workload[side]["max"]
            shown = ratio_text(workload)
            assert f"| {workload['name']} |" in report, (workload["name"], report)
            assert f" {shown} " in report and f" {shown} " in done.stdout, (shown, done.stdout)
        assert (tmp_path / f"{group}.png").read_bytes().startswith(PNG_MAGIC)
        assert f"## {group}" in report
        assert f"({group}.png)" in report or f"/{group}.png)" in report

    # The report is a pure function of the JSON: regenerating it gives the same text.
    (tmp_path / "RESULTS.md").unlink()
    assert _benchmarks("--regenerate", "--out", str(tmp_path)).returncode == 0
    assert (tmp_path / "RESULTS.md").read_text(encoding="utf-8") == report


def test_list_names_each_group_with_what_it_compares() -> None:
    done = _benchmarks("--list")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    groups = sorted(p.stem.removeprefix("bench_") for p in (ROOT / "benchmarks").glob("bench_*.py"))
    assert [line.split()[0] for line in lines] == groups
    assert all(len(line.split()) > 4 and line.endswith(")") for line in lines), lines


def test_ctrl_c_keeps_the_workloads_measured_so_far(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.syspath_prepend(str(ROOT))
    from benchmarks import runner

    def interrupted(group, quick, *, progress, only, save):
        save({"group": group, "status": "running", "quick": quick, "workloads": []})
        raise KeyboardInterrupt

    monkeypatch.setattr(runner, "run_group", interrupted)
    assert runner.main(["files", "--out", str(tmp_path), "--no-progress"]) == 130
    saved = json.loads((tmp_path / "files.json").read_text(encoding="utf-8"))
    assert saved["status"] == "interrupted"
    assert "interrupted; measured so far" in capsys.readouterr().out
    assert (tmp_path / "RESULTS.md").is_file()
