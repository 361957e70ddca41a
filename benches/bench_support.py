"""Shared settings, result store and report writer for the Python record-path benchmarks.

Imported by ``conftest.py`` (which writes the report at session end) and by
``test_bench_record.py`` (which stores each variant's median here).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import statistics
import struct
import subprocess
import sys

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_DIR = os.path.dirname(BENCH_DIR)
#: Where reports are written; ``KQ_BENCH_RESULTS_DIR`` redirects them (the smoke test in
#: ``tests/structure/test_bench_suite.py`` writes to a temporary directory, never over committed results).
RESULTS_DIR = os.environ.get("KQ_BENCH_RESULTS_DIR") or os.path.join(BENCH_DIR, "results")
JSON_PATH = os.path.join(RESULTS_DIR, "python_record.json")
MD_PATH = os.path.join(RESULTS_DIR, "python_record.md")

#: ``KQ_BENCH_QUICK=1``: a smoke-test run (seconds, not minutes); the numbers are not meant to be
#: read. Explicit ``KQUOTA_BENCH_*`` variables still win.
QUICK = os.environ.get("KQ_BENCH_QUICK", "") not in ("", "0")
_DEFAULTS = {"CALLS": "1000", "PASSES": "1", "ROUNDS": "20", "WARMUP": "2"} if QUICK else \
    {"CALLS": "1000", "PASSES": "5", "ROUNDS": "1000", "WARMUP": "50"}

#: Calls per benchmark round (the loop every variant runs; per-call time = round / CALLS).
CALLS = int(os.environ.get("KQUOTA_BENCH_CALLS", _DEFAULTS["CALLS"]))
#: Passes: every variant is measured PASSES times, the passes interleaved (all variants of pass 0,
#: then all of pass 1, ...), so slow drift of the machine hits every variant alike.
PASSES = max(1, int(os.environ.get("KQUOTA_BENCH_PASSES", _DEFAULTS["PASSES"])))
#: Timed rounds per fast variant per pass (the oracle variants use a tenth, at least 20).
ROUNDS = int(os.environ.get("KQUOTA_BENCH_ROUNDS", _DEFAULTS["ROUNDS"]))
#: Untimed rounds before measuring, per pass (warms the handle, the sensor and CPU caches).
WARMUP_ROUNDS = int(os.environ.get("KQUOTA_BENCH_WARMUP", _DEFAULTS["WARMUP"]))

#: variant key -> label shown in the report (also the order of the rows).
VARIANTS = {
    "handle": "handle `h.record_and_get_throttle_time_ms(P, 100, now_ms)`",
    "named": "named `qm.record_and_get_throttle_time_ms(P, 'alice', 'client-1', 100, now_ms)`",
    "empty_handle_args": "empty Python function, handle args",
    "empty_named_args": "empty Python function, named args",
    "noop": "native `_kquota._noop(P, 100, now_ms)` (PyO3 floor)",
    "oracle_named": "oracle named call (pure Python)",
    "oracle_handle": "oracle handle call (pure Python)",
    "handle_clock": "handle, `now_ms=None` (kernel clock)",
    "named_clock": "named, `now_ms=None` (kernel clock)",
    "noop_float_value": "native `_noop(P, 100.0, now_ms)`: value passed as a float",
    "handle_float_value": "handle with value `100.0` (float) instead of `100`",
    "loop_only": "loop alone, no call (included in every row)",
    "connection": "connection quotas, one connection: `record_connection_accept` + `record_connection('127.0.0.2')` "
                  "+ `release_connection` (ip quota set)",
    "tcp_connect": "a loopback TCP connection's own cost: connect + accept + close both ends",
}

#: (key, numerator, denominator, target op, target value); op None = informational.
RATIOS = [
    ("handle_vs_empty", "handle", "empty_handle_args", "<=", 2.0),
    ("named_vs_empty", "named", "empty_named_args", "<=", 2.0),
    ("oracle_vs_handle", "oracle_named", "handle", ">=", 40.0),
    ("oracle_vs_named", "oracle_named", "named", ">=", 40.0),
    ("handle_vs_noop", "handle", "noop", None, None),
    ("named_vs_handle", "named", "handle", None, None),
    ("noop_vs_empty_handle", "noop", "empty_handle_args", None, None),
    ("handle_clock_vs_empty", "handle_clock", "empty_handle_args", None, None),
    ("handle_float_vs_empty", "handle_float_value", "empty_handle_args", None, None),
    ("named_clock_vs_empty", "named_clock", "empty_named_args", None, None),
    # KIP-612: what the connection quotas add to accepting a connection (it should be far below it).
    ("connection_vs_tcp_connect", "connection", "tcp_connect", None, None),
]
REQUIRED = {v for _, a, b, op, _t in RATIOS if op for v in (a, b)}

#: variant key -> {"calls": calls per round, "passes": {pass: [round seconds, ...]}}
#: (filled by record_result during the session).
RAW: dict[str, dict] = {}


def record_result(variant: str, benchmark, pass_no: int = 0) -> None:
    """Stores a finished pytest-benchmark fixture's round times under ``variant`` / ``pass_no``."""
    meta = getattr(benchmark, "stats", None)
    if meta is None:  # --benchmark-disable / --benchmark-skip: nothing measured
        return
    entry = RAW.setdefault(variant, {"calls": benchmark.extra_info.get("calls_per_round", CALLS),
                                     "passes": {}})
    entry["passes"][pass_no] = list(meta.stats.data)


def _median(xs):
    return statistics.median(xs)


def summarize(raw: dict) -> dict:
    """Per-call statistics (ns) of each variant: all passes' rounds pooled, plus each pass's
    median."""
    out = {}
    for variant, entry in raw.items():
        per = 1e9 / entry["calls"]
        pooled = [x * per for data in entry["passes"].values() for x in data]
        if not pooled:
            continue
        if len(pooled) >= 4:
            q1, _, q3 = statistics.quantiles(pooled, n=4)
        else:
            q1 = q3 = pooled[0]
        out[variant] = {
            "median_ns": _median(pooled),
            "min_ns": min(pooled),
            "mean_ns": statistics.fmean(pooled),
            "iqr_ns": q3 - q1,
            "rounds": len(pooled),
            "calls_per_round": entry["calls"],
            "pass_medians_ns": {str(k): _median(v) * per for k, v in sorted(entry["passes"].items())},
        }
    return out


# ----------------------------------------------------------------------------------- ratios


def compute_ratios(results: dict) -> list[dict]:
    """Ratios of the pooled medians, with the range of the same ratio over the passes (each
    pass's median over the same pass's median) as a noise indicator."""
    out = []
    for key, num, den, op, target in RATIOS:
        if num not in results or den not in results:
            continue
        value = results[num]["median_ns"] / results[den]["median_ns"]
        pn, pd = results[num]["pass_medians_ns"], results[den]["pass_medians_ns"]
        per_pass = [pn[k] / pd[k] for k in pn if k in pd]
        met = None
        if op == "<=":
            met = value <= target
        elif op == ">=":
            met = value >= target
        out.append({"key": key, "numerator": num, "denominator": den, "value": value,
                    "pass_min": min(per_pass) if per_pass else None,
                    "pass_max": max(per_pass) if per_pass else None,
                    "target_op": op, "target": target, "met": met})
    return out


# ----------------------------------------------------------------------------- machine info


def _cpu_info() -> dict:
    model, physical = None, set()
    cores_per_socket = None
    try:
        with open("/proc/cpuinfo") as f:
            phys = None
            for line in f:
                k, _, v = line.partition(":")
                k, v = k.strip(), v.strip()
                if k == "model name" and model is None:
                    model = v
                elif k == "physical id":
                    phys = v
                elif k == "core id":
                    physical.add((phys, v))
                elif k == "cpu cores" and cores_per_socket is None:
                    cores_per_socket = int(v)
    except OSError:
        pass
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = None
    return {
        "cpu_model": model or platform.processor() or "unknown",
        "logical_cpus": os.cpu_count(),
        "physical_cores": len(physical) or cores_per_socket,
        "usable_cpus": usable,
    }


def _git() -> dict:
    def run(*args):
        try:
            return subprocess.run(["git", "-C", REPO_DIR, *args], capture_output=True, text=True,
                                  timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"commit": run("rev-parse", "HEAD") or None,
            "dirty": bool(run("status", "--porcelain", "--", "rust", "python"))}


def _elf_section_names(path: str) -> set[str] | None:
    """Section names of a 64-bit little-endian ELF file (None if not one)."""
    try:
        with open(path, "rb") as f:
            ident = f.read(64)
            if ident[:4] != b"\x7fELF" or ident[4] != 2 or ident[5] != 1:
                return None
            e_shoff, = struct.unpack_from("<Q", ident, 0x28)
            e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", ident, 0x3A)
            f.seek(e_shoff)
            table = f.read(e_shentsize * e_shnum)
            headers = [struct.unpack_from("<IIQQQQ", table, i * e_shentsize) for i in range(e_shnum)]
            _, _, _, _, str_off, str_size = headers[e_shstrndx]
            f.seek(str_off)
            strtab = f.read(str_size)
            return {strtab[h[0]:strtab.index(b"\0", h[0])].decode() for h in headers}
    except (OSError, struct.error, ValueError, IndexError):
        return None


def _sha256(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return None


def build_info() -> dict:
    """How the imported ``kquota._kquota`` was built: release or debug, and the evidence."""
    import kquota
    from kquota import _kquota

    so = os.path.realpath(_kquota.__file__)
    info = {"extension": so, "version": getattr(kquota, "__version__", None), "mode": "unknown",
            "evidence": []}
    # 1. An attribute exported by the extension, if the kernel has one.
    for attr in ("__build_profile__", "BUILD_PROFILE", "build_profile", "_build_profile"):
        v = getattr(_kquota, attr, None)
        if v is not None:
            v = v() if callable(v) else v
            info["mode"] = str(v)
            info["evidence"].append(f"kquota._kquota.{attr} = {v!r}")
            break
    for attr in ("__debug_assertions__", "DEBUG_ASSERTIONS", "_debug_assertions"):
        v = getattr(_kquota, attr, None)
        if v is not None:
            v = v() if callable(v) else v
            if info["mode"] == "unknown":
                info["mode"] = "debug" if v else "release"
            info["evidence"].append(f"kquota._kquota.{attr} = {v!r}")
            break
    # 2. Byte-identical to a cargo profile's output in rust/target/<profile>/?
    digest = _sha256(so)
    target = os.path.join(REPO_DIR, "rust", "target")
    matched = None
    if digest and os.path.isdir(target):
        for profile in sorted(os.listdir(target)):
            cand = os.path.join(target, profile, "lib_kquota.so")
            if os.path.isfile(cand) and _sha256(cand) == digest:
                matched = profile
                break
    if matched:
        info["evidence"].append(f"identical to rust/target/{matched}/lib_kquota.so")
        if info["mode"] == "unknown":
            info["mode"] = "release" if matched == "release" else ("debug" if matched == "debug" else matched)
    else:
        info["evidence"].append("not identical to any rust/target/<profile>/lib_kquota.so")
    # 3. Debug info present? (cargo's dev profile has debuginfo; release has none by default.)
    sections = _elf_section_names(so)
    if sections is not None:
        has_dbg = ".debug_info" in sections
        info["evidence"].append(".debug_info section present (dev-profile-like)" if has_dbg
                                else "no .debug_info section (release-profile-like)")
        if info["mode"] == "unknown":
            info["mode"] = "debug (guess)" if has_dbg else "release (guess)"
    try:
        info["extension_bytes"] = os.path.getsize(so)
        built = os.path.getmtime(so)
        info["extension_mtime"] = _dt.datetime.fromtimestamp(built, _dt.timezone.utc).isoformat(timespec="seconds")
        # Sources edited after the extension was written: the numbers may not reflect them.
        newer = []
        for sub in ("rust/quota-core/src", "rust/kquota-py/src"):
            root = os.path.join(REPO_DIR, sub)
            for dirpath, _dirs, files in os.walk(root):
                for name in files:
                    p = os.path.join(dirpath, name)
                    if name.endswith(".rs") and os.path.getmtime(p) > built:
                        newer.append(os.path.relpath(p, REPO_DIR))
        info["sources_newer_than_extension"] = sorted(newer)
        if newer:
            info["evidence"].append(f"STALE? {len(newer)} Rust source file(s) changed after the extension was built")
    except OSError:
        pass
    return info


def machine_info() -> dict:
    try:
        import pytest_benchmark
        pb = pytest_benchmark.__version__
    except Exception:  # pragma: no cover
        pb = None
    return {
        **_cpu_info(),
        "platform": platform.platform(),
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "python_build": " ".join(platform.python_build()),
        "pytest_benchmark": pb,
        "git": _git(),
    }


# ---------------------------------------------------------------------------------- writing


def _fmt_ns(x: float) -> str:
    return f"{x:,.1f}"


def _target_str(op, target) -> str:
    if op is None:
        return "(info)"
    return f"{'≤' if op == '<=' else '≥'} {target:g}×"


def _range_str(r: dict) -> str:
    if r.get("pass_min") is None:
        return "—"
    return f"{r['pass_min']:.2f}–{r['pass_max']:.2f}×"


def render_markdown(report: dict) -> str:
    res, m, b = report["results"], report["machine"], report["build"]
    lines = [
        "# kquota: Python per-request cost of `record_and_get_throttle_time_ms`",
        "",
        f"Generated {report['generated_at']} by `{report['command']}`. "
        f"One round = a loop of {report['calls_per_round']} calls; per-call time = round time / "
        f"{report['calls_per_round']}, so every figure includes the same loop overhead (row `loop_only`). "
        f"Each variant was measured in {report['passes']} interleaved passes; medians pool every round "
        f"of every pass.",
        "",
        "## Ratios (from the medians of this one run)",
        "",
        "| variant | median ns/call | ratio | value | range over passes | target | met |",
        "|---|---:|---|---:|---|---|---|",
    ]
    for r in report["ratios"]:
        met = "—" if r["met"] is None else ("yes" if r["met"] else "**no**")
        lines.append(
            f"| {r['numerator']} | {_fmt_ns(res[r['numerator']]['median_ns'])} | "
            f"{r['numerator']} / {r['denominator']} ({_fmt_ns(res[r['denominator']]['median_ns'])} ns) | "
            f"{r['value']:.2f}× | {_range_str(r)} | {_target_str(r['target_op'], r['target'])} | {met} |")
    lines += [
        "",
        "## All variants",
        "",
        "| variant | what | median ns/call | min ns/call | IQR ns/call | pass medians ns/call | rounds |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    for key, label in VARIANTS.items():
        if key in res:
            r = res[key]
            passes = ", ".join(f"{v:.1f}" for v in r["pass_medians_ns"].values())
            lines.append(f"| {key} | {label} | {_fmt_ns(r['median_ns'])} | {_fmt_ns(r['min_ns'])} | "
                         f"{_fmt_ns(r['iqr_ns'])} | {passes} | {r['rounds']} |")
    git = m.get("git") or {}
    lines += [
        "",
        "## Machine and build",
        "",
        f"- CPU: {m['cpu_model']} — {m['logical_cpus']} logical CPUs, {m['physical_cores']} physical cores, "
        f"{m['usable_cpus']} usable by this process",
        f"- Platform: {m['platform']}",
        f"- Python: {m['python']} ({m['python_build']})",
        f"- pytest-benchmark: {m['pytest_benchmark']}",
        f"- kquota: {b['version']}, extension `{os.path.relpath(b['extension'], REPO_DIR)}` "
        f"({b.get('extension_bytes', '?'):,} bytes, written {b.get('extension_mtime', '?')})",
        f"- Build mode: **{b['mode']}** — " + "; ".join(b["evidence"]),
        f"- Git HEAD: {git.get('commit')}"
        f"{' (rust/ or python/ had uncommitted changes at report time)' if git.get('dirty') else ''}",
        "",
        "Timing targets are reported, never asserted: the benchmark run passes whatever the numbers are.",
        "",
    ]
    return "\n".join(lines)


def build_report(command: str) -> dict:
    results = summarize(RAW)
    ratios = compute_ratios(results)
    return {
        "generated_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "calls_per_round": CALLS,
        "passes": PASSES,
        "results": {k: results[k] for k in VARIANTS if k in results},
        "ratios": ratios,
        "targets_met": all(r["met"] for r in ratios if r["met"] is not None),
        "machine": machine_info(),
        "build": build_info(),
    }


def missing_required() -> list[str]:
    return sorted(REQUIRED - RAW.keys())


def write_report(command: str) -> dict:
    report = build_report(command)
    os.makedirs(RESULTS_DIR, exist_ok=True)
    with open(JSON_PATH, "w") as f:
        json.dump(report, f, indent=2, sort_keys=False)
        f.write("\n")
    with open(MD_PATH, "w") as f:
        f.write(render_markdown(report))
    return report


def command_line() -> str:
    return " ".join(["python -m pytest", *sys.argv[1:]]) if sys.argv else "python -m pytest"
