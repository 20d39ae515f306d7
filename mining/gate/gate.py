"""The validation gate: static -> correctness -> profile, each cached by a content hash.

`run_gate(problem_dir, kernel, config)` is the one entry point; the CLI, the miner and the
benchmarks all call it. Stage results are plain JSON-serializable dicts with a `status` of
pass | fail | skip | error and, when not pass, a one-line `reason`.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from corpora.problem import Problem, ProblemError, Workload, load_problem
from mining.gate.binding import EntryBinding, bind_entry
from mining.gate.cache import GateCache, content_key
from mining.gate.cases import ADVERSARIAL_VERSION, REDUCE_BUDGET, adversarial_workloads, reduce_workload
from mining.gate.data import ITEMSIZE, compare, make_inputs
from mining.gate.coverage import COVERAGE_VERSION, coverage_stage
from mining.gate.errors import BadInput
from mining.gate.executors import explain_failure, gpu_info, make_executor, resolve_executor
from mining.gate.gpu_lock import gpu_timing_lock
from mining.gate.reference import ReferenceRun, write_case as write_reference_case
from mining.gate.sandbox import abort_runs, read_output, require_isolation
from mining.gate.harness import (HARNESS_HEADER, harness_source, parse_harness_stdout, write_case_files, write_cases,
                                 write_manifest)
from mining.gate.static import environment_failure, nvcc_path, static_stage

ALL_STAGES = ("static", "correctness", "profile")
KNOWN_STAGES = (*ALL_STAGES, "coverage")  # coverage: asked for by the walk (mining/gate/coverage.py)


def default_store() -> Path:
    return Path(os.environ.get("SKILLS_STORE", ".skills"))


@dataclass(frozen=True)
class GateConfig:
    executor: str = "auto"
    stages: tuple[str, ...] = ALL_STAGES
    seeds: tuple[int, ...] = (0, 1, 2)
    archs: Optional[tuple[str, ...]] = None  # None: solution.toml's archs, else sm_80, sm_90
    sanitize: bool = False
    timeout_s: float = 120.0
    mem_mb: float = 8192.0
    use_cache: bool = True
    store: Optional[Path] = None
    # workloads too big for the CPU emulator: run in a reduced form there (same inner sizes,
    # outer axes cut; mining/gate/cases.py), or listed as skipped when no reduced form is legal
    cpu_reduce_tags: tuple[str, ...] = ("large",)
    adversarial: bool = True  # add the op type's value-adversarial cases (mining/gate/cases.py)
    large_seeds: int = 1  # seeds for workloads tagged "large" (their numpy reference dominates gate time)
    profile_warmup: int = 5
    profile_repeats: int = 30
    flush_bytes: int = 256 << 20  # > 2x the H200's 60 MB L2
    trust: bool = False  # run builds, harnesses and the reference without a sandbox when none is available


@dataclass
class GateResult:
    problem: str
    kernel: str
    executor: str
    stages: dict[str, dict[str, Any]] = field(default_factory=dict)
    wall_s: float = 0.0

    @property
    def passed(self) -> bool:
        ran = [s for s in self.stages.values() if s.get("status") != "skip"]
        return bool(ran) and all(s.get("status") == "pass" for s in ran) and \
            self.stages.get("correctness", {}).get("status") in ("pass", None)

    @property
    def verdict(self) -> str:
        if self.passed:
            return "pass"
        if any(s.get("status") == "unsupported" for s in self.stages.values()):
            return "unsupported"
        return "fail"

    @property
    def reason(self) -> str:
        for name, stage in self.stages.items():
            if stage.get("status") not in ("pass", "skip"):
                return f"{name}: {stage.get('reason', stage.get('status'))}"
        return ""

    def to_dict(self) -> dict[str, Any]:
        return {"problem": self.problem, "kernel": self.kernel, "executor": self.executor,
                "passed": self.passed, "verdict": self.verdict, "reason": self.reason,
                "wall_s": round(self.wall_s, 4), "stages": self.stages}


def run_gate(problem_dir: Path, kernel: Optional[Path] = None, config: GateConfig = GateConfig(),
             source: Optional[str] = None) -> GateResult:
    """Gate one kernel of a problem. `source` overrides the file's text (used by the miner for
    candidates that exist only in memory; `kernel` still names the file for messages)."""
    start = time.perf_counter()
    for stage in config.stages:
        if stage not in KNOWN_STAGES:
            raise BadInput(f"--stages: unknown stage {stage!r} ({', '.join(KNOWN_STAGES)})")
    try:
        problem = load_problem(Path(problem_dir))
    except ProblemError as exc:
        raise BadInput(str(exc)) from None
    kernel_path = problem.kernel_path(kernel)
    if source is None:
        source = read_kernel(kernel_path)
    elif len(source) > MAX_KERNEL_BYTES:
        raise BadInput(f"{kernel_path}: kernel source is {len(source) >> 10} KB, over the {MAX_KERNEL_BYTES >> 10} KB limit")
    solution = problem.solution.for_file(kernel_path.name)
    binding = bind_entry(source, kernel_path, solution.entry, problem.definition)
    if "static" in config.stages and nvcc_path() is None:
        raise BadInput(f"{kernel_path}: nvcc not found on PATH: install the CUDA toolkit, "
                       "or skip the static stage with --stages correctness")
    executor_name = resolve_executor(config.executor)
    executor = make_executor(executor_name)
    cache = GateCache((config.store or default_store()).resolve() / "cache" / "gate")
    result = GateResult(problem=problem.name, kernel=str(kernel_path), executor=executor_name)
    archs = config.archs or tuple(solution.archs) or ("sm_80", "sm_90")
    src_hash = hashlib.sha256(source.encode()).hexdigest()
    inputs_hash = kernel_inputs_hash(problem, solution)

    with tempfile.TemporaryDirectory(prefix="ks-gate-") as tmp, ThreadPoolExecutor(max_workers=2) as pool:
        workdir = Path(tmp)
        fp = executor.fingerprint() if {"correctness", "profile", "coverage"} & set(config.stages) else ""
        # static (nvcc) and correctness (harness build + runs) are independent: run them side by side.
        static_future = correctness_future = None
        if "static" in config.stages:
            static_future = pool.submit(_cached, cache, config, ("static", src_hash, inputs_hash, archs,
                                                                 _static_toolchain()),
                                        lambda: _static(source, kernel_path, workdir, archs, solution.flags, config))
        if "correctness" in config.stages:
            key = ("correctness", src_hash, problem.content_hash, inputs_hash, fp,
                   config.seeds, config.large_seeds, config.sanitize,
                   config.cpu_reduce_tags if executor_name == "cpu" else (),
                   ADVERSARIAL_VERSION if config.adversarial else "", REDUCE_BUDGET)
            correctness_future = pool.submit(
                _cached, cache, config, key,
                lambda: _correctness(problem, binding, source, kernel_path, solution.flags, solution.gpu_only,
                                     executor, workdir, cache, config))
        if "coverage" in config.stages:
            key = ("coverage", src_hash, problem.content_hash, inputs_hash, fp, config.seeds, config.large_seeds,
                   config.cpu_reduce_tags, ADVERSARIAL_VERSION if config.adversarial else "", COVERAGE_VERSION)
            workloads = _workloads_for(problem, executor_name, config)[0]
            result.stages["coverage"] = _cached(
                cache, config, key,
                lambda: coverage_stage(problem, binding, source, kernel_path, solution.flags, executor, workdir,
                                       workloads, config.seeds, config.large_seeds, config.timeout_s, config.mem_mb))
        if static_future is not None:
            result.stages["static"] = _result(static_future)
        if correctness_future is not None:
            result.stages["correctness"] = _result(correctness_future)
        if result.stages.get("static", {}).get("status") in ("fail", "error"):
            # nvcc rejects the file: what the CPU build said adds nothing, and nothing can be timed.
            for stage in ("correctness", "profile"):
                if stage in config.stages:
                    result.stages[stage] = {"status": "skip", "reason": "static stage failed"}
            result.wall_s = time.perf_counter() - start
            return result
        if "profile" in config.stages:
            if executor_name != "cuda":
                result.stages["profile"] = {"status": "skip", "reason": "static only: no GPU timing on the "
                                            "cpu executor (no speed claim is made from CPU runs)"}
            elif result.stages.get("correctness", {}).get("status") not in (None, "pass"):
                result.stages["profile"] = {"status": "skip", "reason": "correctness failed"}
            else:
                key = ("profile", src_hash, problem.content_hash, inputs_hash, fp,
                       config.profile_warmup, config.profile_repeats, config.flush_bytes)
                result.stages["profile"] = _cached(
                    cache, config, key,
                    lambda: _profile(problem, binding, source, kernel_path, solution.flags, executor,
                                     workdir, cache, config))
    result.wall_s = time.perf_counter() - start
    return result


def kernel_inputs_hash(problem: Problem, solution) -> str:
    """What besides the kernel source and the problem's content (definition, workloads,
    reference) decides a result: this kernel's solution.toml settings (entry, flags, gpu_only),
    headers beside it that it may include, and the harness the gate generates around it."""
    digest = hashlib.sha256(json.dumps(solution.model_dump(mode="json"), sort_keys=True).encode())
    for path in sorted(problem.root.iterdir()):
        if path.is_file() and path.suffix in (".h", ".cuh", ".hpp", ".inc"):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    digest.update(HARNESS_HEADER.read_bytes())
    return digest.hexdigest()


def _result(future) -> dict[str, Any]:
    """A stage thread's result; Ctrl-C (or SIGTERM) while waiting kills the sandboxed runs of every
    thread at once, so leaving the thread pool does not wait for a hung harness's timeout."""
    try:
        return future.result()
    except BaseException as exc:
        if not isinstance(exc, Exception):
            abort_runs()
        raise


MAX_KERNEL_BYTES = int(os.environ.get("KS_MAX_KERNEL_BYTES", 4 << 20))  # the largest corpus kernel is ~60 KB


def read_kernel(path: Path) -> str:
    """A kernel file's text; BadInput (one line naming the file) when missing, binary or too big."""
    try:
        size = path.stat().st_size
        if not path.is_file():
            raise BadInput(f"{path}: not a regular file")
        if size > MAX_KERNEL_BYTES:
            raise BadInput(f"{path}: kernel file is {size >> 10} KB, over the {MAX_KERNEL_BYTES >> 10} KB limit")
        return path.read_text()
    except FileNotFoundError:
        raise BadInput(f"{path}: kernel file not found") from None
    except UnicodeDecodeError:
        raise BadInput(f"{path}: not a UTF-8 text file") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot read the kernel: {exc.strerror or exc}") from None


def _cached(cache: GateCache, config: GateConfig, key_parts: tuple, compute) -> dict[str, Any]:
    key = content_key(*key_parts)
    if config.use_cache:
        hit = cache.get_json(key)
        if hit is not None:
            hit["cached"] = True
            return hit
    require_isolation(config.trust)  # only now: a cached answer runs nothing (and spawns no probe)
    start = time.perf_counter()
    value = compute()
    value["wall_s"] = round(time.perf_counter() - start, 4)
    value["cached"] = False
    if not value.get("transient"):  # timeouts and similar are not facts about the kernel
        cache.put_json(key, value)
    return value


def _static_toolchain() -> str:
    from mining.gate.static import cuobjdump_path, nvcc_version

    # static-2: per-kernel loop counts (backward branches) beside the opcode histogram;
    # static-3: two-lane half arithmetic and the compiled thread bound (cuobjdump -elf);
    # static-4: the rejoin branch of a divergent warp-synchronous path is not a loop;
    # static-5: per kernel, the loops whose body holds each opcode family (loop_ops)
    return f"{nvcc_version()}|sass={bool(cuobjdump_path())}|static-5"


def _static(source: str, kernel_path: Path, workdir: Path, archs: tuple[str, ...], flags: list[str],
            config: GateConfig) -> dict[str, Any]:
    src = workdir / "static" / kernel_path.name
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_text(source)
    out = static_stage(src, src.parent, archs, [f for f in flags if f != "-lineinfo"], config.timeout_s)
    if out.get("reason"):
        out["reason"] = out["reason"].replace(str(src), str(kernel_path))
    from corpora.code.parse import parse_cuda, syntax_issues

    issues = syntax_issues(parse_cuda(source))
    out["parse"] = {"ok": not issues, "issues": [f"{kernel_path}:{i.line}:{i.column}: {i.kind} near {i.snippet!r}"
                                                 for i in issues]}
    return out


def _build(executor, binding: EntryBinding, source: str, kernel_path: Path, flags: list[str], workdir: Path,
           cache: GateCache, config: GateConfig, variant: str = "default") -> tuple[Any, Optional[Path]]:
    """Build the harness (cached by content); returns (BuildResult, binary path). `variant` is
    the run spec's build: `default`, or `asan` (the CPU executor's AddressSanitizer build)."""
    asan = variant == "asan"
    build_dir = workdir / f"build-{executor.name}-{variant}"
    build_dir.mkdir(exist_ok=True)
    kernel_text = executor.prepare_source(source) if hasattr(executor, "prepare_source") else source
    (build_dir / kernel_path.name).write_text(kernel_text)
    harness = build_dir / "ks_harness_main.cu"
    harness.write_text(harness_source(binding, kernel_path.name))
    key = content_key("build", executor.fingerprint(), kernel_text, harness.read_text(),
                      HARNESS_HEADER.read_text(), flags, asan)
    from mining.gate.executors import BuildResult

    if config.use_cache and (hit := cache.get_file(key)) is not None:
        return BuildResult(True, hit, cached=True), hit
    res = executor.build(harness, build_dir / kernel_path.name, flags, build_dir / "harness", asan,
                         config.timeout_s)
    if res.ok and res.binary is not None and not res.binary.is_symlink() and res.binary.is_file():
        res.binary = cache.put_file(key, res.binary)  # (a symlink from the build is not followed into the cache)
    elif res.ok:
        res.ok, res.reason = False, "the build did not produce a regular file"
        # keep the CPU binary's debug info resolvable (addr2line) from the cache location
    if not res.ok:
        res.reason = res.reason.replace(str(build_dir / kernel_path.name), str(kernel_path))
    return res, res.binary


def _workloads_for(problem: Problem, executor_name: str, config: GateConfig) -> tuple[list[Workload], list[str]]:
    """The cases to run: the problem's workloads (on the CPU, `large` ones in a reduced form) and
    the op type's value-adversarial cases."""
    chosen, skipped = [], []
    for w in problem.workloads:
        if executor_name == "cpu" and set(w.tags) & set(config.cpu_reduce_tags):
            reduced = reduce_workload(problem.definition, w)
            if reduced is None:
                skipped.append(w.label)
            else:
                chosen.append(reduced)
        else:
            chosen.append(w)
    if config.adversarial:
        chosen += adversarial_workloads(problem.definition, problem.workloads)
    return chosen, skipped


def _correctness(problem: Problem, binding: EntryBinding, source: str, kernel_path: Path, flags: list[str],
                 gpu_only: bool, executor, workdir: Path, cache: GateCache, config: GateConfig) -> dict[str, Any]:
    if executor.name == "cpu":
        unsupported = executor.unsupported(source)
        if gpu_only or unsupported:
            what = ", ".join(f"{feat} (line {line})" for line, feat in unsupported) or "gpu_only = true in solution.toml"
            return {"status": "unsupported", "reason": f"not checkable on the cpu executor: {what}; "
                    "run with --executor cuda"}
    workloads, skipped = _workloads_for(problem, executor.name, config)
    if not workloads:
        return {"status": "unsupported", "reason": "no workload has a form the cpu executor can run "
                f"(tagged {', '.join(config.cpu_reduce_tags)}, no legal reduced form); run with --executor cuda"}
    data_dir = workdir / "data"
    data_dir.mkdir(exist_ok=True)
    ref_dir = workdir / "reference"
    ref_dir.mkdir(exist_ok=True)
    references: dict[int, dict[str, Any]] = {}
    ref_cases = []

    def reference_for(cid: int, w: Workload, seed: int, inputs: dict[str, Any]) -> None:
        hit = _cached_reference(cache, problem, w, seed)
        if hit is None:
            ref_cases.append(write_reference_case(ref_dir, cid, problem.definition, w, seed, inputs))
        else:
            references[cid] = hit

    # large workloads (their numpy reference dominates) and derived cases: fewer seeds
    cases, manifest = write_cases(problem.definition, workloads, config.seeds, config.large_seeds, data_dir,
                                  reference_for)
    # the reference runs in its own sandboxed process while the harness builds
    ref_run = ReferenceRun(problem.definition, problem.reference_source, str(problem.root / "definition.json"),
                           ref_dir, ref_cases, config.timeout_s, config.mem_mb) if ref_cases else None
    specs = executor.run_specs(config.sanitize)
    builds: dict[str, tuple[Any, Optional[Path]]] = {}
    for variant in dict.fromkeys(spec.build for spec in specs):
        builds[variant] = _build(executor, binding, source, kernel_path, flags, workdir, cache, config, variant)
        build = builds[variant][0]
        if not build.ok:
            if ref_run is not None:
                ref_run.cancel()
            return {"status": "fail", "reason": f"build failed: {build.reason}", "build_log": build.log,
                    **({"transient": True} if build.transient else {})}
    build = builds["default"][0]
    if ref_run is not None:
        computed = ref_run.result()
        for c in ref_run.cases:
            references[c.cid] = computed[c.cid]
            _store_reference(cache, problem, c.workload, c.seed, computed[c.cid])

    runs = []
    status, reason, transient = "pass", "", False
    for spec in specs:
        binary = builds[spec.build][1]
        res = executor.run(binary, manifest, spec, config.timeout_s, config.mem_mb, config.sanitize)
        parsed = parse_harness_stdout(res.stdout)
        run_summary: dict[str, Any] = {"run": spec.label, "wall_s": round(res.wall_s, 4), "cases": []}
        for case in cases:
            cid = case["case"]
            entry = dict(case)
            if cid not in parsed["ok"]:
                entry["status"] = "not_run"
                run_summary["cases"].append(entry)
                continue
            outputs = {}
            ok = True
            for name, ref in references[cid].items():
                rtol, atol = problem.definition.tolerance_for(name)
                try:  # a hostile harness may have swapped the file for a symlink or a huge file
                    raw = read_output(data_dir / f"c{cid}_{name}.out", ref.size * ITEMSIZE[problem.definition.outputs[name].dtype])
                except OSError:
                    raw = b""
                cmp = compare(raw, ref, problem.definition.outputs[name].dtype, rtol, atol)
                outputs[name] = cmp.to_dict()
                ok = ok and cmp.ok
            entry["status"] = "pass" if ok else "fail"
            entry["outputs"] = outputs
            run_summary["cases"].append(entry)
            if not ok and status == "pass":
                status = "fail"
                name, cmp = next((n, c) for n, c in outputs.items() if not c["ok"])
                reason = (f"{spec.label} run, {case['workload']} seed {case['seed']}: output {name!r} has "
                          f"{cmp['wrong']} wrong and {cmp['unwritten']} unwritten of {cmp['elements']} elements "
                          f"(max abs err {cmp['max_abs_err']:.3g}; first bad {cmp['first_bad']})")
        if res.ok and len(parsed["ok"]) < len(cases) and status == "pass":
            # a clean exit that did not report every case is no evidence for the missing ones
            status = "fail"
            missing = next(c for c in cases if c["case"] not in parsed["ok"])
            reason = (f"{spec.label} run, {missing['workload']} seed {missing['seed']}: the harness exited without "
                      "reporting this case" + (" (its output went over the cap and was dropped)"
                                                if res.output_truncated else ""))
        if not res.ok:
            failed_at = next((c for c in cases if c["case"] not in parsed["ok"]), None)
            why = explain_failure(res, config.timeout_s, kernel_path)
            run_summary["error"] = why
            if status == "pass" or (status == "fail" and not reason.startswith(spec.label)):
                status = "fail"
                where = f"{failed_at['workload']} seed {failed_at['seed']}: " if failed_at else ""
                reason = f"{spec.label} run, {where}{why}"
            transient = transient or environment_failure(res.stderr, res.timed_out, res.mem_exceeded, res.returncode)
        runs.append(run_summary)
        if status == "fail":
            break  # one failing order is enough evidence; skip the others
    n_pass = sum(1 for r in runs for c in r["cases"] if c.get("status") == "pass")
    out: dict[str, Any] = {"status": status, "runs": runs, "cases_passed": n_pass,
                           "cases_total": len(cases) * len(runs), "seeds": list(config.seeds),
                           "workloads": [w.label for w in workloads], "build_s": round(build.wall_s, 3),
                           "build_cached": build.cached}
    if skipped:
        out["skipped_workloads"] = skipped
        out["note"] = (f"skipped on the cpu executor (tagged {', '.join(config.cpu_reduce_tags)}, no reduced form "
                       f"satisfies the constraints): {', '.join(skipped)}")
    if reason:
        out["reason"] = reason
    if transient:
        out["transient"] = True
    return out


def _reference_folder(cache: GateCache, problem: Problem, w: Workload, seed: int) -> Path:
    key = content_key("reference", problem.content_hash, w.identity(), seed)
    return cache.root / "refs" / key[:2] / key


def _cached_reference(cache: GateCache, problem: Problem, w: Workload, seed: int) -> Optional[dict[str, Any]]:
    """Reference outputs cached on disk: the expert, the naive kernel and every mining candidate
    of a problem share them (large workloads take seconds of numpy each)."""
    import numpy as np

    folder = _reference_folder(cache, problem, w, seed)
    names = list(problem.definition.outputs)
    if all((folder / f"{n}.npy").exists() for n in names):
        try:
            return {n: np.load(folder / f"{n}.npy", allow_pickle=False) for n in names}
        except (OSError, ValueError):
            pass
    return None


def _store_reference(cache: GateCache, problem: Problem, w: Workload, seed: int, refs: dict[str, Any]) -> None:
    import numpy as np

    folder = _reference_folder(cache, problem, w, seed)
    cache.root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=cache.root, prefix=".tmp-ref-"))
    for n, arr in refs.items():
        np.save(tmp / f"{n}.npy", arr, allow_pickle=False)
    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.replace(tmp, folder)
    except OSError:  # another process stored it first
        shutil.rmtree(tmp, ignore_errors=True)


def _profile(problem: Problem, binding: EntryBinding, source: str, kernel_path: Path, flags: list[str],
             executor, workdir: Path, cache: GateCache, config: GateConfig) -> dict[str, Any]:
    build, binary = _build(executor, binding, source, kernel_path, flags, workdir, cache, config)
    if not build.ok:
        return {"status": "fail", "reason": f"build failed: {build.reason}"}
    data_dir = workdir / "profile"
    data_dir.mkdir(exist_ok=True)
    cases = []
    for cid, w in enumerate(problem.workloads):
        inputs = make_inputs(problem.definition, w, 0)
        cases.append(write_case_files(data_dir, cid, problem.definition, w, inputs))
        del inputs
    manifest = data_dir / "manifest.txt"
    write_manifest(manifest, cases, mode="profile", warmup=config.profile_warmup,
                   repeats=config.profile_repeats, flush_bytes=config.flush_bytes)
    spec = executor.run_specs(False)[0]
    # only the timed run holds the GPU: the build and the input files above are CPU work
    with gpu_timing_lock(config.store or default_store()):
        res = executor.run(binary, manifest, spec, max(config.timeout_s, 300.0), config.mem_mb, False)
    parsed = parse_harness_stdout(res.stdout)
    if not res.ok:
        return {"status": "fail", "reason": explain_failure(res, config.timeout_s, kernel_path), "transient": res.timed_out}
    per_workload = {}
    for cid, w in enumerate(problem.workloads):
        times = parsed["times"].get(cid, [])
        if not times:
            continue
        q = statistics.quantiles(times, n=4) if len(times) >= 2 else [times[0]] * 3
        per_workload[w.label] = {"median_ms": statistics.median(times), "q1_ms": q[0], "q3_ms": q[2],
                                 "iqr_ms": q[2] - q[0], "min_ms": min(times), "mean_ms": statistics.fmean(times),
                                 "repeats": len(times), "axes": w.axes, "tags": list(w.tags)}
    return {"status": "pass", "method": "cuda events around the entry call, L2 flushed before each repeat",
            "warmup": config.profile_warmup, "repeats": config.profile_repeats,
            "device": {**(gpu_info() or {}), **parsed["device"]}, "workloads": per_workload}
