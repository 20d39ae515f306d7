"""Read a KernelBench-style problem file in a child process: ``python -I kernelbench_probe.py FILE``.

The file is untrusted code: `mining.wrap` runs this script only through the gate's
``run_limited`` (own process group, wall-clock and memory limits). It imports the file, builds
``Model(*get_init_inputs())``, calls ``forward(*get_inputs())`` once on the CPU and prints one
JSON object: the forward parameter names, every input (tensor shape/dtype or scalar value),
every output, the model's state (parameters and buffers), the init inputs and the file's
module-level integer constants (axis names). Errors go to stdout as {"error": "..."} (exit 3).
Standard library + torch only: it must run without the project on the path.
"""
import importlib.util
import inspect
import json
import sys

DTYPES = {"torch.float32": "float32", "torch.float16": "float16", "torch.bfloat16": "bfloat16",
          "torch.float64": "float64", "torch.int32": "int32", "torch.int64": "int64", "torch.uint8": "uint8",
          "torch.int8": "int8"}


def fail(msg):
    print(json.dumps({"error": msg}))
    sys.exit(3)


def tensor_info(t):
    dt = DTYPES.get(str(t.dtype))
    if dt is None:
        fail(f"unsupported tensor dtype {t.dtype}")
    return {"kind": "tensor", "shape": [int(s) for s in t.shape], "dtype": dt}


def main(path):
    try:
        import torch
    except ImportError:
        fail("torch is not installed (needed to read a KernelBench problem)")
    spec = importlib.util.spec_from_file_location("kernelbench_problem", path)
    mod = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(mod)
    except Exception as exc:
        fail(f"importing it raised {type(exc).__name__}: {exc}")
    for need in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(mod, need):
            fail(f"no {need} (a KernelBench problem defines Model, get_inputs and get_init_inputs)")
    torch.manual_seed(0)
    init = list(mod.get_init_inputs())
    for v in init:
        if not isinstance(v, (int, float, bool, list, tuple)):
            fail(f"get_init_inputs returns a {type(v).__name__}; only numbers (and lists of them) are supported")
    model = mod.Model(*init).eval()
    inputs = list(mod.get_inputs())
    params = [p for p in inspect.signature(model.forward).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    names = [p.name for p in params]
    if len(names) < len(inputs):
        names += [f"in{i}" for i in range(len(names), len(inputs))]
    described = []
    for v in inputs:
        if isinstance(v, torch.Tensor):
            described.append(tensor_info(v))
        elif isinstance(v, (bool, int)):
            described.append({"kind": "scalar", "dtype": "int32", "value": int(v)})
        elif isinstance(v, float):
            described.append({"kind": "scalar", "dtype": "float32", "value": v})
        else:
            fail(f"get_inputs returns a {type(v).__name__}; only tensors and numbers are supported")
    with torch.no_grad():
        out = model(*inputs)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    if not all(isinstance(o, torch.Tensor) for o in outs):
        fail("forward must return a tensor or a tuple of tensors")
    state = [{"name": k, **tensor_info(v)} for k, v in model.state_dict().items()]
    consts = {k: v for k, v in vars(mod).items()
              if isinstance(v, int) and not isinstance(v, bool) and not k.startswith("_")}
    print(json.dumps({"forward_params": names[:len(inputs)], "inputs": described,
                      "outputs": [tensor_info(o) for o in outs], "state": state, "init_inputs": init,
                      "constants": consts}))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        fail("usage: kernelbench_probe.py PROBLEM.py")
    main(sys.argv[1])
