"""Measure which torch ops synchronize on CUDA: a sweep over PyTorch's OpInfo database.

Run on a machine with a CUDA GPU and torch (``expecttest`` must be importable, for
``torch.testing._internal``), from the repository root::

    python scripts/measure_optable.py

It writes ``python_helper/syncfree/data/optable-torch<major>.<minor>-cuda.json`` for the
installed torch (``--out PATH`` writes elsewhere).

For every entry of ``torch.testing._internal.common_methods_invocations.op_db`` and each
of float32 and one integer dtype (where the entry supports them on CUDA), the first
``--samples`` sample inputs are made on the CPU with a fixed seed (so a CPU replay makes
the very same samples), moved to CUDA, the stream is synchronized, and the op is called
once under ``torch.cuda.set_sync_debug_mode('warn')`` with a warnings filter ``always``
for "called a synchronizing CUDA operation": the number of those warnings is the call's
sync count. A call that synced is repeated once, to tell first-call effects apart.
Each sample records the signature of its arguments (``syncfree.capture.optable.signature``:
tensor vs Python scalar, rank class, dtype kind, keyword values), which is how predict
mode tells argument-dependent ops apart, and a fingerprint (shapes and Python values,
``optable.fingerprint``) by which the CPU replay in ``tests/test_optable.py`` tells a sample
that another torch version's OpInfo changed from a wrong prediction.

Python-scalar forms. Whether a call syncs can depend on which overload its value argument
takes: ``masked_fill(mask, float('-inf'))`` is ``aten::masked_fill.Scalar`` (no sync),
``masked_fill(mask, t)`` with a 0-d CUDA tensor is ``masked_fill.Tensor`` (reads ``t``
with ``item()``). OpInfo's samples use whichever kinds they happen to, so at every *value
place* of an op (an argument some sample passes as a 0-d tensor) each sample is measured
again with the value as a Python float, int, bool and complex (:func:`scalar_forms`);
such records carry ``"form": "p2=float"`` (place, kind) next to their base sample's ``i``.
Predict mode answers a call whose Python scalar kind was not measured at a value place
"unmeasured" rather than guessing a sync from the other overload.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
import traceback
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helper"))

MESSAGE = "called a synchronizing CUDA operation"
DEVICE = "cuda"


def qualname(func) -> str | None:
    name = getattr(func, "__name__", None)
    if not name or name == "<lambda>":
        return None
    module = getattr(func, "__module__", None)
    owner = getattr(func, "__objclass__", None) or getattr(getattr(func, "__self__", None), "__class__", None)
    if module:
        return f"{module}.{getattr(func, '__qualname__', name)}"
    if owner is not None and owner.__name__ in ("TensorBase", "Tensor"):
        return f"torch.Tensor.{name}"
    return name


def to_cuda(value):
    import torch
    from torch.utils._pytree import tree_map

    def move(x):
        if isinstance(x, torch.Tensor):
            y = x.detach().to(DEVICE)
            return y.requires_grad_(x.requires_grad) if y.is_leaf and x.requires_grad else y
        return x
    return tree_map(move, value)


def count_syncs(fn, args, kwargs) -> tuple[int, str | None]:
    import torch

    sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
    sync()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore")
        warnings.filterwarnings("always", message=MESSAGE)
        if DEVICE == "cuda":
            torch.cuda.set_sync_debug_mode("warn")
        error = None
        try:
            fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - recorded
            error = f"{type(exc).__name__}: {str(exc)[:160]}"
        finally:
            if DEVICE == "cuda":
                torch.cuda.set_sync_debug_mode(0)
    n = sum(1 for w in caught if str(w.message).startswith(MESSAGE))
    sync()
    return n, error


FORM_KINDS = ("float", "int", "bool", "complex")


def _is_value(x) -> bool:
    """A 0-d tensor or a Python number: what an op's value argument can be."""
    import torch

    if isinstance(x, torch.Tensor):
        return x.dim() == 0 and x.layout == torch.strided
    return isinstance(x, (bool, int, float, complex))


def value_places(samples) -> list:
    """Places (an int position or a keyword name) where some sample of an op passes a 0-d
    tensor: the arguments whose Python-scalar forms are measured."""
    import torch

    found = []
    for args, kwargs in samples:
        for place, x in [*enumerate(args), *kwargs.items()]:
            if isinstance(x, torch.Tensor) and x.dim() == 0 and place not in found:
                found.append(place)
    return found


def _as_kind(value, kind: str):
    import torch

    if isinstance(value, torch.Tensor):
        value = value.item()
    if kind == "complex":
        return complex(value)
    if isinstance(value, complex):
        value = value.real
    return {"float": float, "int": int, "bool": bool}[kind](value)


def _kind_of(value) -> str | None:
    for kind, types in (("bool", bool), ("int", int), ("float", float), ("complex", complex)):
        if isinstance(value, types):
            return kind
    return None


def form_variant(args: tuple, kwargs: dict, form: str):
    """The sample (args, kwargs) with the value at a form's place as that Python kind
    (``"p2=float"``, ``"k:value=int"``); None when the place holds no value."""
    where, _, kind = form.partition("=")
    args, kwargs = tuple(args), dict(kwargs)
    if where.startswith("p"):
        i = int(where[1:])
        if i >= len(args) or not _is_value(args[i]):
            return None
        try:
            value = _as_kind(args[i], kind)
        except (TypeError, ValueError, OverflowError, RuntimeError):
            return None
        return args[:i] + (value,) + args[i + 1:], kwargs
    name = where[2:]
    if name not in kwargs or not _is_value(kwargs[name]):
        return None
    try:
        kwargs[name] = _as_kind(kwargs[name], kind)
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return None
    return args, kwargs


def scalar_forms(args: tuple, kwargs: dict, places: list):
    """(form, args, kwargs) of each Python-scalar form of one sample at the op's value
    places: every kind the sample does not already pass there."""
    for place in places:
        value = args[place] if isinstance(place, int) and place < len(args) else (
            kwargs.get(place) if isinstance(place, str) else None)
        if value is None or not _is_value(value):
            continue
        for kind in FORM_KINDS:
            if _kind_of(value) == kind:
                continue
            form = f"p{place}={kind}" if isinstance(place, int) else f"k:{place}={kind}"
            variant = form_variant(args, kwargs, form)
            if variant is not None:
                yield (form, *variant)


def pick_dtypes(op, torch):
    try:
        supported = op.supported_dtypes(DEVICE)
    except Exception:  # noqa: BLE001
        supported = set()
    out = []
    if torch.float32 in supported:
        out.append(torch.float32)
    for d in (torch.int64, torch.int32, torch.uint8):
        if d in supported:
            out.append(d)
            break
    if not out and supported:
        out.append(sorted(supported, key=str)[0])
    return out


def measure(op, dtype, i: int, args: tuple, kwargs: dict, signature, fingerprint) -> dict:
    """One sample's record: its signature and fingerprint, and the syncs of one call on
    CUDA (a call that synced is repeated once, to tell first-call effects apart)."""
    rec = {"dtype": str(dtype)[6:], "i": i, "sig": signature(args, kwargs),
           "fp": fingerprint(args, kwargs)}
    try:
        cargs, ckwargs = to_cuda((args, dict(kwargs)))
        n, err = count_syncs(op.op, cargs, ckwargs)
        if err is None and n:
            cargs, ckwargs = to_cuda((args, dict(kwargs)))
            n2, _ = count_syncs(op.op, cargs, ckwargs)
            if n2 != n:
                rec["first_call"] = n
                n = n2
        rec["syncs"] = n if err is None else None
        if err is not None:
            rec["error"] = err
            rec["syncs_before_error"] = n
    except Exception as exc:  # noqa: BLE001
        rec["syncs"] = None
        rec["error"] = f"move: {type(exc).__name__}: {str(exc)[:120]}"
    return rec


def resign(path: Path, n_samples: int) -> int:
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    from syncfree.capture.optable import signature

    table = json.loads(path.read_text())
    by_key = {op.name + (f".{op.variant_test_name}" if op.variant_test_name else ""): op for op in op_db}
    changed = 0
    for key, entry in table["ops"].items():
        op = by_key.get(key)
        if op is None:
            continue
        cache = {}
        for rec in entry["samples"]:
            if rec["i"] < 0:
                continue
            if rec["dtype"] not in cache:
                torch.manual_seed(0)
                try:
                    cache[rec["dtype"]] = list(itertools.islice(
                        op.sample_inputs("cpu", getattr(torch, rec["dtype"]), requires_grad=False), n_samples))
                except Exception:  # noqa: BLE001
                    cache[rec["dtype"]] = []
            samples = cache[rec["dtype"]]
            if rec["i"] < len(samples):
                sample = samples[rec["i"]]
                args, kwargs = (sample.input, *sample.args), sample.kwargs
                if rec.get("form"):
                    variant = form_variant(args, kwargs, rec["form"])
                    if variant is None:
                        continue
                    args, kwargs = variant
                sig = signature(args, kwargs)
                changed += sig != rec["sig"]
                rec["sig"] = sig
    path.write_text(json.dumps(table, indent=0, sort_keys=True))
    print(f"{changed} signatures changed")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", help="the table to write (default: python_helper/syncfree/data/"
                                      "optable-torch<major>.<minor>-cuda.json for the installed torch)")
    parser.add_argument("--no-forms", action="store_true",
                        help="skip the Python-scalar forms of ops' value arguments")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--budget", type=float, default=420.0, help="seconds; stop and write what is measured")
    parser.add_argument("--only", nargs="*", help="op names to measure (default all)")
    parser.add_argument("--dry-run-cpu", action="store_true", help="check the script without a GPU (counts 0)")
    parser.add_argument("--resign", action="store_true",
                        help="CPU only: recompute the 'sig' of every sample of the --out table from the same "
                             "CPU-made samples (after a change to optable.describe), keeping the measured counts")
    ns = parser.parse_args()
    if ns.out is None:
        import re

        import torch

        major, minor = re.match(r"(\d+)\.(\d+)", torch.__version__).groups()
        ns.out = str(Path(__file__).resolve().parents[1] / "python_helper" / "syncfree" / "data"
                     / f"optable-torch{major}.{minor}-cuda.json")
    if ns.resign:
        return resign(Path(ns.out), ns.samples)
    global DEVICE
    if ns.dry_run_cpu:
        DEVICE = "cpu"

    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    from syncfree.capture.optable import fingerprint, signature

    start = time.monotonic()
    if DEVICE == "cuda":
        torch.cuda.set_sync_debug_mode("warn")  # the one-time prototype warning, not counted
        torch.cuda.set_sync_debug_mode(0)
    table = {
        "format": 1,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0) if DEVICE == "cuda" else "cpu (dry run)",
        "python": platform.python_version(),
        "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "method": ("OpInfo op_db; first %d samples per dtype, made on CPU with torch.manual_seed(0) "
                   "per (op, dtype), moved to CUDA; syncs = sync-debug-mode warnings during the call"
                   % ns.samples) + ("" if ns.no_forms else
                                    "; each sample again with every Python scalar kind (float, int, "
                                    "bool, complex) at the op's value places ('form')"),
        "ops": {},
        "incomplete": [],
    }
    out_path = Path(ns.out)

    def write():
        table["elapsed_s"] = round(time.monotonic() - start, 1)
        tmp = out_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(table, indent=0, sort_keys=True))
        os.replace(tmp, out_path)

    ops = [op for op in op_db if not ns.only or op.name in ns.only]
    for k, op in enumerate(ops):
        key = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        if time.monotonic() - start > ns.budget:
            table["incomplete"].append(key)
            continue
        names = sorted({n for n in (getattr(op.op, "__name__", None),
                                    getattr(op.method_variant, "__name__", None) if op.method_variant else None)
                        if n and n != "<lambda>"})
        entry = {"name": op.name, "variant": op.variant_test_name, "names": names,
                 "funcs": sorted({q for q in (qualname(op.op), qualname(op.method_variant)) if q}),
                 "samples": []}
        t0 = time.monotonic()
        for dtype in pick_dtypes(op, torch):
            if time.monotonic() - t0 > 20:
                entry["truncated"] = True
                break
            torch.manual_seed(0)
            try:
                samples = list(itertools.islice(op.sample_inputs("cpu", dtype, requires_grad=False),
                                                ns.samples))
            except Exception as exc:  # noqa: BLE001
                entry["samples"].append({"dtype": str(dtype)[6:], "i": -1, "sig": "", "syncs": None,
                                         "error": f"samples: {type(exc).__name__}: {str(exc)[:120]}"})
                continue
            places = [] if ns.no_forms else value_places(
                [((s.input, *s.args), s.kwargs) for s in samples])
            for i, sample in enumerate(samples):
                args = (sample.input, *sample.args)
                calls = [(None, args, dict(sample.kwargs)),
                         *scalar_forms(args, dict(sample.kwargs), places)]
                for form, call_args, call_kwargs in calls:
                    rec = measure(op, dtype, i, call_args, call_kwargs, signature, fingerprint)
                    if form is not None:
                        if rec.get("error") is not None:
                            continue  # a form the op rejects (narrow(x, 0, 1.5, 2)): nothing to keep
                        rec["form"] = form
                    entry["samples"].append(rec)
        counts = {s["syncs"] for s in entry["samples"] if s.get("syncs") is not None}
        entry["summary"] = ("error" if not counts else "never" if counts == {0}
                            else "always" if 0 not in counts else "depends")
        entry["max_syncs"] = max(counts) if counts else None
        table["ops"][key] = entry
        if k % 50 == 0:
            write()
            print(f"[{time.monotonic() - start:6.1f}s] {k}/{len(ops)} {key}", flush=True)
    write()
    syncing = sorted(k for k, e in table["ops"].items() if e["summary"] in ("always", "depends"))
    print(f"done in {time.monotonic() - start:.1f}s: {len(table['ops'])} ops measured, "
          f"{len(syncing)} sync, {len(table['incomplete'])} not reached")
    print("syncing:", " ".join(syncing))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)
