"""sites.py: instruction spans, naming the operation, finding matching, aggregation."""

from __future__ import annotations

import sys

import pytest

from standins import compile_cell
from syncfree.capture.sites import (
    MAX_FRAMES,
    SiteTable,
    SyncSite,
    _rule_at,
    _trimmed_frames,
    classify_instruction,
    instruction_span,
    kind_label,
    shorten_path,
)


class Probe:
    """Stands in for tensors, torch and numpy: every operation that may sync records what
    `classify_instruction` says of the instruction that called it."""

    seen: list[str | None] = []

    def __init__(self, name: str = "probe") -> None:
        self._name = name

    def _record(self):
        Probe.seen.append(classify_instruction(sys._getframe(2)))
        return Probe()

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return Probe(name)

    def __call__(self, *args, **kwargs):
        result = self._record()
        # What these return on a GPU: host values, on which nothing syncs any more.
        return {"item": 0.0, "tolist": [], "numpy": []}.get(self._name, result)

    def __len__(self):
        return 0

    def __getitem__(self, key):
        return self._record()

    def __setitem__(self, key, value):
        self._record()

    def __bool__(self):
        self._record()
        return True

    def __float__(self):
        self._record()
        return 0.0

    def __int__(self):
        self._record()
        return 0

    def __format__(self, spec):
        self._record()
        return "0"

    def __gt__(self, other):
        return Probe()

    def __neg__(self):
        return Probe()


# The debug-mode patterns of sync-facts.md whose sync happens in the cell's own instruction
# (those that sync inside torch's Python code, like print or torch.unique on a GPU, are
# named by their torch frames: tests/gpu covers them).
PATTERNS = [
    ("s = x.sum().item()", "item"),
    ("s = float(x.sum())", "python_scalar"),
    ("s = int(x.sum())", "python_scalar"),
    ("_ = f'{x.sum():.3f}'", "format"),
    ("_ = x[0].tolist()", "tolist"),
    ("y = x.cpu()", "to_host"),
    ("y = x.to('cpu')", "to_host"),
    ("y = x.cpu().numpy()", "to_host"),
    ("y = xc.cuda()", "to_device"),
    ("y = xc.to('cuda')", "to_device"),
    ("y = x.to(dev)", "to_host"),
    ("y = x.type(torch.LongTensor)", "to_host"),
    ("y = torch.tensor([1, 2, 3], device='cuda')", "tensor_from_python"),
    ("y = torch.as_tensor(np.arange(3), device='cuda')", "tensor_from_python"),
    ("y = torch.cuda.BoolTensor([True, False])", "tensor_from_python"),
    ("if loss.item() > 0.1:\n    y = x\nelse:\n    y = -x", "item"),
    ("if loss > 0.1:\n    y = x\nelse:\n    y = -x", "python_bool"),
    ("y = max(a, b)", "python_bool"),
    ("y = torch.is_nonzero(loss)", "python_bool"),
    ("y = x[idx_cpu]", "index"),
    ("y = x[[0, 2, 5]]", "index"),
    ("x[idx_gpu] = 0", "index_put"),
    ("x[0, 0] = 0", "index_put"),
    ("y = x[i_gpu:j_gpu]", "slice_bounds"),
    ("y = x[bool_mask]", "mask_index"),
    ("y = x[x > 0]", "mask_index"),
    ("y = torch.nonzero(mask)", "nonzero"),
    ("y = torch.masked_select(x, mask)", "masked_select"),
    ("y = torch.unique(r)", "unique"),
    ("y = torch.repeat_interleave(v, r)", "repeat_interleave"),
    ("y = torch.bincount(r, minlength=4)", "bincount"),
    ("y = bool(torch.any(mask))", "python_bool"),
    ("y = torch.allclose(x, x)", "allclose"),
    ("y = torch.histc(v, bins=4)", "histc"),
    ("vals = torch.stack([x.sum(), x.mean(), x.max()]).cpu().tolist()", "to_host"),
    ("y = torch.isnan(x).any().item()", "item"),
    ("y = len(mask.nonzero())", "nonzero"),
    ("y = mask.nonzero(as_tuple=True)", "nonzero"),
    ("y = torch.nn.functional.one_hot(r)", "one_hot"),
    ("y = (x\n     .sum()\n     .item())", "item"),
]


@pytest.mark.parametrize("source, kind", PATTERNS, ids=[p[0].split("\n")[0] for p in PATTERNS])
def test_instruction_names_the_operation(source, kind):
    torch = pytest.importorskip("torch")
    code, _ = compile_cell(source + "\n")
    names = {n: Probe(n) for n in ("x", "xc", "loss", "a", "b", "idx_cpu", "idx_gpu", "i_gpu",
                                   "j_gpu", "mask", "r", "v", "torch", "np")}
    names["bool_mask"] = torch.zeros(3, dtype=torch.bool)
    names["dev"] = "cpu"
    Probe.seen = []
    exec(code, names)
    # The probe records every operation that may sync; the one that does must be named.
    assert kind in Probe.seen, Probe.seen


def _span_at_call(source: str, offset: int = 0):
    spans = []

    def grab(*args):
        caller = sys._getframe(1)
        spans.append(instruction_span(caller.f_code, caller.f_lasti, offset))

    code, _ = compile_cell(source)
    exec(code, {"grab": grab, "x": 0})
    return spans[0]


def test_instruction_span_counts_characters_not_bytes():
    assert _span_at_call("s = 'ééé'; v = grab(x)\n") == (1, 15, 1, 22)
    assert _span_at_call("s = 'ééé'; v = grab(x)\n", offset=4) == (5, 15, 5, 22)


def test_instruction_span_of_a_call_over_lines():
    assert _span_at_call("v = grab(\n    x,\n)\n") == (1, 4, 3, 1)


def _finding(rule, line, col, end_line, end_col):
    return {"rule": rule, "range": {"line": line, "col": col, "end_line": end_line, "end_col": end_col}}


def test_the_tightest_finding_around_the_instruction_wins():
    findings = [_finding("SF201", 3, 0, 3, 30), _finding("SF101", 3, 4, 3, 18),
                _finding("SF999", 4, 4, 4, 18)]
    assert _rule_at(findings, (3, 4, 3, 18)) == "SF101"
    assert _rule_at(findings, (3, 6, 3, 10)) == "SF101"


def test_a_finding_inside_the_instruction_matches_when_none_contains_it():
    findings = [_finding("SF101", 2, 11, 2, 18), _finding("SF102", 2, 4, 2, 11)]
    assert _rule_at(findings, (2, 4, 2, 18)) == "SF101"  # the widest inside: ties -> first
    assert _rule_at(findings, (2, 20, 2, 25)) is None
    assert _rule_at([], (2, 20, 2, 25)) is None


def test_shorten_path():
    assert shorten_path("/usr/lib/python3.12/site-packages/torch/_tensor.py") == "torch/_tensor.py"
    assert shorten_path("/opt/torch/.venv/lib/python3.12/site-packages/torch/cuda/streams.py") == \
        "torch/cuda/streams.py"
    assert shorten_path("/home/me/src/torch/nn/modules/module.py") == "torch/nn/modules/module.py"
    assert shorten_path("/home/me/project/train/loop.py") == "train/loop.py"
    assert shorten_path("C:\\envs\\Lib\\site-packages\\numpy\\core.py") == "numpy/core.py"


def _stack(depth):
    if depth == 0:
        return [sys._getframe()]
    return _stack(depth - 1) + [sys._getframe()]


def test_trimmed_frames_keep_entry_points_and_the_innermost():
    library = _stack(5)  # inner -> outer, as the recorder walks them
    frames, truncated = _trimmed_frames(library, 3)
    assert truncated and len(frames) == 3
    assert [f["line"] for f in frames] == [library[-1].f_lineno, library[-2].f_lineno,
                                           library[0].f_lineno]
    frames, truncated = _trimmed_frames(library, MAX_FRAMES)
    assert not truncated and len(frames) == 6
    assert _trimmed_frames(library, 0) == ((), True)
    assert _trimmed_frames([], 0) == ((), False)


def test_site_table_aggregates_by_chain_and_kind_and_caps():
    table = SiteTable(limit=2)
    a = table.site_for((3,), "item", "SF101", (), None, False)
    assert table.site_for((3,), "item", "SF101", (), None, False) is a
    b = table.site_for((5, 3), "item", "SF101", (), None, False)
    assert b is not a
    assert not table.takes((9,), None) and table.takes((5, 3), None)  # full: known chains only
    overflow = table.site_for((9,), "nonzero", None, (), None, False)
    assert overflow is table.overflow and table.truncated
    a.count, b.count = 2, 1
    assert [s.chain for s in table.sites()] == [(3,), (5, 3)]


def test_site_message_and_report():
    site = SyncSite((7, 3), "item", "SF101", ({"file": "torch/x.py", "line": 1, "name": "f"},),
                    None, False)
    site.count, site.blocked_s, site.measured = 64, 0.0412, 64
    assert site.message == "`.item()` synced 64x, blocked 41.2 ms"
    report = site.to_report()
    assert report == {"line": 3, "kind": "item", "count": 64, "cost_ms": None, "cost_each_ms": None,
                      "cost_share": None, "blocked_ms": 41.2, "chain": [7, 3],
                      "frames": [{"file": "torch/x.py", "line": 1, "name": "f"}],
                      "rule": "SF101", "message": "`.item()` synced 64x, blocked 41.2 ms",
                      "label": "`.item()`"}
    threaded = SyncSite((2,), "explicit", None, (), "loader", False, "torch.cuda.synchronize()")
    threaded.count = 1
    assert threaded.message == "`torch.cuda.synchronize()` synced 1x (thread loader)"
    assert threaded.to_report()["thread"] == "loader"
    assert kind_label("no-such-kind") == kind_label("other")
    site.cost_s, site.cost_share = 0.0032, 0.05
    assert site.message == "`.item()` synced 64x, cost 3.2 ms of GPU time (5.0%), blocked 41.2 ms"
    assert (site.to_report()["cost_ms"], site.cost_each_ms) == (3.2, 0.05)


def test_a_site_keeps_the_blocked_time_of_its_first_call():
    """The first sync of a site is its first call (warm-up): its blocked time is kept apart, set
    once when the site is made, and a recurring site is then ranked by the rest."""
    import torch  # noqa: F401  (the recorder needs it)

    from syncfree.capture.recorder import SyncRecorder

    code, filename = compile_cell(
        "import sys\n"
        "for b in BLOCKED:\n"
        "    RECORD(sys._getframe(), 'item', blocked_s=b)\n"
        "RECORD(sys._getframe(), 'item')\n")
    recorder = SyncRecorder("warn", measure_blocked=False, cell_files={filename: 0}, findings={filename: []})
    with recorder:
        exec(code, {"BLOCKED": [0.1, 0.001, 0.002], "RECORD": recorder.record_sync})
    loop, after = sorted(recorder.sites, key=lambda s: s.line)
    assert (loop.line, loop.count, loop.blocked_ms, loop.first_ms, loop.steady_ms) == (3, 3, 103.0, 100.0, 3.0)
    assert loop.to_report()["first_ms"] == 100.0
    # A site whose syncs were not timed (predict mode) has neither.
    assert (after.line, after.blocked_ms, after.first_ms, after.steady_ms) == (4, None, None, None)
    assert "first_ms" not in after.to_report()


def test_rank_key_puts_the_cost_after_the_first_call_first():
    from syncfree.capture.sites import rank_key

    warm_up = rank_key(False, 100.99, 100.0, 100)   # 100 ms once, then 0.01 ms per call
    per_step = rank_key(False, 100.0, 1.0, 100)      # 1 ms every step
    module_move = rank_key(True, 150.0, 40.0, 16)    # paid once: ranked after every recurring site
    assert sorted([module_move, warm_up, per_step]) == [per_step, warm_up, module_move]
    # Predict mode: nothing timed, by count as before.
    assert rank_key(False, None, None, 7) < rank_key(False, None, None, 3)


def test_once_text_says_the_one_off_syncs_and_the_recurring_rows_first_calls():
    from syncfree.capture.sites import once_text

    assert once_text([], []) == ""
    assert once_text([(16, 80.0), (2, None)], [2.0, 1.1]) == (
        ", repeated syncs first; 18 syncs paid once (setup, compilation), 80.0 ms, and 3.1 ms at the first call of "
        "each repeated one")
    assert once_text([(3, None)], []) == ", repeated syncs first; 3 syncs paid once (setup, compilation)"


def test_a_positions_lock_left_held_by_another_thread_costs_a_moment_not_a_deadlock():
    # A KeyboardInterrupt between a `with`'s acquire and its block can leave the lock held by its thread (a CPython
    # race, which the leak tests' injected interrupts hit once): another thread's sync then waited for ever in CI.
    import threading

    from syncfree.capture import sites

    taken, release = threading.Event(), threading.Event()

    def hold():
        with sites._positions_lock:
            taken.set()
            release.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert taken.wait(30)
        code = compile("x = 1\ny = 2\n", "<held>", "exec")
        assert sites._positions(code) == list(code.co_positions())  # worked out uncached
        assert id(code) not in sites._positions_cache
    finally:
        release.set()
        holder.join()
    assert sites._positions(code) == list(code.co_positions()) and id(code) in sites._positions_cache


def test_a_zero_dim_index_is_told_apart_from_a_host_index_without_evaluating_it():
    # x[i] that synced with a 0-dim CUDA i is a read (SF503), a host index a copy (SF501); a CPU name is not the
    # first (torch reads a 0-dim CPU index on the CPU), a full reduction is (a CPU one would not have synced).
    import ast

    from syncfree.capture.sites import _zero_dim_cuda_index

    torch = pytest.importorskip("torch")
    frame = sys._getframe()
    i_cpu, idx_cpu = torch.tensor(1), torch.arange(3)  # noqa: F841 (read from the frame)
    for source, expected in [("x[i_cpu]", False), ("x[idx_cpu]", False), ("x[idx_cpu[0]]", False),
                             ("x[scores.argmax()]", True), ("x[scores.argmax(1)]", False), ("x[n - 1]", False)]:
        part = ast.parse(source, mode="eval").body.slice
        assert _zero_dim_cuda_index(part, frame) is expected, source
