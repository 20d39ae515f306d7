"""The problem's Python reference, run in a sandboxed process of its own (mining/gate/reference.py).

    python -I reference_worker.py JOB.json

JOB.json: {"reference": path, "origin": "definition.json path for messages", "outputs": [names],
"cases": [{"id", "inputs": {name: .npy path}, "scalars": {name: value}, "axes": {...},
"out_dir": folder}]}. For each case it calls run(**inputs, **axes) and saves each output as
<out_dir>/ref_c<id>_<name>.npy. A problem it finds goes to stdout as one JSON line
{"error": "..."} with exit status 3. Standard library and numpy only: this file is not imported
by the project, and nothing of the project is importable here.
"""
import inspect
import json
import sys


def _fail(message: str) -> None:
    sys.stdout.write(json.dumps({"error": message}) + "\n")
    sys.stdout.flush()
    sys.exit(3)


def _outputs(result, names):
    """run(...)'s return value -> one value per output name, or an error message."""
    if isinstance(result, dict):
        missing = [n for n in names if result.get(n) is None]
        if missing:
            return None, f"reference returned a dict without output {missing[0]!r} (keys: {sorted(map(str, result))})"
        return [result[n] for n in names], ""
    if result is None:
        return None, f"reference run(...) returned None; it must return the output{'s' if len(names) > 1 else ''} " \
                     f"({', '.join(names)})"
    if len(names) > 1:
        if not isinstance(result, (tuple, list)) or len(result) != len(names):
            got = len(result) if isinstance(result, (tuple, list)) else 1
            return None, f"reference returned {got} value(s), the definition has {len(names)} outputs ({', '.join(names)})"
        if any(v is None for v in result):
            return None, "reference returned None for an output"
        return list(result), ""
    return [result], ""


def main(job_path: str) -> None:
    import numpy as np

    with open(job_path) as fh:
        job = json.load(fh)
    origin = job["origin"]
    with open(job["reference"]) as fh:
        source = fh.read()
    namespace = {"__name__": "kernel_skills_reference"}
    try:
        exec(compile(source, origin, "exec"), namespace)  # noqa: S102 - sandboxed: this is what the worker is for
    except BaseException as exc:  # noqa: BLE001
        _fail(f"{origin}: reference failed to load: {type(exc).__name__}: {exc}")
    run = namespace.get("run")
    if not callable(run):
        _fail(f"{origin}: reference defines no callable run(...)")
    params = inspect.signature(run).parameters
    takes_all = any(p.kind == p.VAR_KEYWORD for p in params.values())
    names = job["outputs"]
    for case in job["cases"]:
        kwargs = {n: np.load(p, allow_pickle=False) for n, p in case["inputs"].items()}
        kwargs.update(case["scalars"])
        kwargs.update(case["axes"])
        if not takes_all:
            kwargs = {k: v for k, v in kwargs.items() if k in params}
        try:
            result = run(**kwargs)
        except BaseException as exc:  # noqa: BLE001
            _fail(f"{origin}: reference raised {type(exc).__name__}: {exc} on {case['label']}")
        values, why = _outputs(result, names)
        if values is None:
            _fail(f"{origin}: {why} on {case['label']}")
        for name, value in zip(names, values):
            try:
                arr = np.asarray(value)
            except Exception as exc:  # noqa: BLE001
                _fail(f"{origin}: reference output {name!r} is not an array: {type(exc).__name__}: {exc}")
            if arr.dtype == object:
                _fail(f"{origin}: reference output {name!r} is not numeric (dtype object)")
            np.save(f"{case['out_dir']}/ref_c{case['id']}_{name}.npy", arr, allow_pickle=False)
        del kwargs, result, values


if __name__ == "__main__":
    main(sys.argv[1])
