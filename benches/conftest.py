"""Benchmark session setup and the results writer.

* puts ``benches/`` (for ``bench_support``) and ``tests/support/`` (for the oracle) on ``sys.path``;
* at session end, turns the medians stored by the benchmarks into ratios against the targets and
  writes ``benches/results/python_record.json`` and ``.md`` -- only when every variant a target
  needs was measured in this run (a ``-k`` subset or ``--benchmark-disable`` run writes nothing,
  so it cannot overwrite a full report with a partial one);
* interleaves the benchmark passes (see ``bench_support.PASSES``);
* prints the ratio table in the terminal summary.

Nothing here fails a run on timing.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
for _p in (_HERE, os.path.join(os.path.dirname(_HERE), "tests", "support")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import bench_support  # noqa: E402

_written = {}


def pytest_collection_modifyitems(session, config, items):
    """Interleaves the passes: all benchmark variants of pass 0, then all of pass 1, ...

    Only items parametrized with ``pass_no`` (the benchmarks in this directory) move, and only
    among the slots they already occupy; everything else keeps its place.
    """
    slots = [i for i, item in enumerate(items)
             if "pass_no" in getattr(getattr(item, "callspec", None), "params", {})]
    ordered = sorted((items[i] for i in slots),
                     key=lambda item: item.callspec.params["pass_no"])  # stable: keeps file order
    for i, item in zip(slots, ordered):
        items[i] = item


def pytest_sessionfinish(session, exitstatus):
    if not bench_support.RAW:
        return
    if bench_support.missing_required():
        _written["skipped"] = bench_support.missing_required()
        return
    _written["report"] = bench_support.write_report(bench_support.command_line())


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    tr = terminalreporter
    if "skipped" in _written:
        tr.write_sep("-", "kquota record-path ratios")
        tr.write_line("not written: variants missing from this run: " + ", ".join(_written["skipped"]))
        return
    report = _written.get("report")
    if not report:
        return
    tr.write_sep("-", "kquota record-path ratios (medians, ns per call)")
    res = report["results"]
    for key in bench_support.VARIANTS:
        if key in res:
            tr.write_line(f"  {key:<18} {res[key]['median_ns']:>10.1f} ns")
    for r in report["ratios"]:
        target = bench_support._target_str(r["target_op"], r["target"])
        met = "" if r["met"] is None else ("met" if r["met"] else "MISSED")
        rng = "" if r["pass_min"] is None else f"[{r['pass_min']:.2f}-{r['pass_max']:.2f}]"
        tr.write_line(f"  {r['numerator'] + ' / ' + r['denominator']:<40} {r['value']:>7.2f}x "
                      f"{rng:<13} {target:<8} {met}")
    b = report["build"]
    tr.write_line(f"  build: {b['mode']} ({'; '.join(b['evidence'])})")
    tr.write_line(f"  written: {os.path.relpath(bench_support.JSON_PATH)}, "
                  f"{os.path.relpath(bench_support.MD_PATH)}")
