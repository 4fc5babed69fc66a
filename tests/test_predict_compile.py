"""``torch.compile`` under predict mode (syncfree/capture/predict/compiles.py): compiled for
real where no virtual CUDA value reaches the compiled code, run eagerly (syncs predicted,
a note) where one does or where the code itself uses the CUDA device.

torch._dynamo is imported here at collection, before any session patches torch: real
compiles need dynamo's tables of torch functions built on the real ones (a dynamo first
imported inside predict mode runs compiled code eagerly, and the note says so).
"""

from __future__ import annotations

import sys
import types

import pytest

pytest_plugins = ["pytester"]

torch = pytest.importorskip("torch")
dynamo = pytest.importorskip("torch._dynamo")

from torch._dynamo.testing import CompileCounter  # noqa: E402
from torch._dynamo.utils import counters  # noqa: E402

from syncfree.capture.predict import (  # noqa: E402
    COMPILE_NOTE_PREFIX,
    PredictSession,
    compiles,  # noqa: E402
)

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def _dynamo_tables_hold_the_real_functions():
    """Each test here compiles for real only where dynamo's tables hold torch's real functions at the session's start
    (compiles._dynamo_tables_real). In one clean-clone run every test of this file ran eagerly in one xdist worker: say
    why at once (what replaced torch.cuda.synchronize, left by an earlier test of that worker) rather than in 16
    frame counts of 0."""
    if not compiles._dynamo_tables_real():
        now = torch.cuda.synchronize
        pytest.fail(f"dynamo's tables do not hold torch's functions now: torch.cuda.synchronize is {now!r} from "
                    f"{getattr(now, '__module__', None)} (a replacement an earlier test left in this process)")
    yield


class Recorder:
    """The two methods predict mode calls on a recorder."""

    def __init__(self) -> None:
        self.kinds: list[str] = []
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)

    def record_sync(self, frame, kind=None, *, predicted=False):
        self.kinds.append(kind)


@pytest.fixture(autouse=True)
def fresh_dynamo():
    dynamo.reset()
    yield
    dynamo.reset()


def compile_notes(recorder: Recorder) -> list[str]:
    return [n for n in recorder.notes if n.startswith(COMPILE_NOTE_PREFIX)]


# ----------------------------------------------------------------- CPU code compiles for real


@pytest.mark.parametrize("fullgraph", [False, True])
def test_compiled_code_on_cpu_tensors_compiles_for_real(fullgraph):
    counter = CompileCounter()
    scale = torch.full((3,), 2.0)  # closed over

    @torch.compile(backend=counter, fullgraph=fullgraph)
    def step(t):
        return (t * scale).sum()

    recorder = Recorder()
    graphs_before = counters["stats"]["unique_graphs"]
    depth = torch._C._len_torch_function_stack()
    with PredictSession(recorder):
        assert torch._C._len_torch_function_stack() == depth + 1
        results = [step(torch.ones(3)).item() for _ in range(3)]
        assert torch._C._len_torch_function_stack() == depth + 1  # the mode is back
    assert results == [6.0, 6.0, 6.0]
    assert counter.frame_count == 1  # compiled once, then run from dynamo's cache
    assert counters["stats"]["unique_graphs"] == graphs_before + 1  # dynamo's own count
    assert recorder.kinds == [] and recorder.notes == []


def test_a_module_and_an_optimizer_step_on_cpu_compile_for_real():
    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 2)

        def forward(self, t):
            return self.linear(t).relu().sum()

    net_counter, step_counter = CompileCounter(), CompileCounter()
    recorder = Recorder()
    with PredictSession(recorder):
        net = Net()
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        compiled_net = torch.compile(net, backend=net_counter)
        compiled_step = torch.compile(optimizer.step, backend=step_counter)
        for _ in range(2):
            compiled_net(torch.ones(2, 4)).backward()
            compiled_step()
    assert net_counter.frame_count >= 1 and step_counter.frame_count >= 1
    assert compile_notes(recorder) == []


def test_cpu_code_compiles_for_real_while_a_virtual_tensor_lives_elsewhere():
    counter = CompileCounter()
    compiled = torch.compile(lambda t: t.exp().sum(), backend=counter)
    recorder = Recorder()
    with PredictSession(recorder):
        model = torch.nn.Linear(2, 2).cuda()  # virtually on CUDA, not reached by the call
        compiled(torch.zeros(2))
        model(torch.ones(1, 2, device="cuda")).sum().item()
    assert counter.frame_count == 1
    assert recorder.kinds == ["to_device", "to_device", "item"] and compile_notes(recorder) == []


def test_compiled_code_still_sees_the_stand_ins():
    counter = CompileCounter()

    @torch.compile(backend=counter)
    def per_device(t):
        return t * torch.cuda.device_count(), torch.cuda.is_available()

    with PredictSession(Recorder()):
        scaled, available = per_device(torch.ones(2))
    assert scaled.tolist() == [1.0, 1.0] and available is True  # as on a one-GPU machine
    assert counter.frame_count >= 1


def test_the_mode_comes_back_when_compiled_code_raises():
    counter = CompileCounter()

    @torch.compile(backend=counter)
    def fails(t):
        doubled = t * 2
        dynamo.graph_break()  # the first graph compiles; the rest raises
        raise ValueError(f"bad {doubled.shape[0]}")

    depth = torch._C._len_torch_function_stack()
    with PredictSession(Recorder()):
        with pytest.raises(ValueError, match="bad 2"):
            fails(torch.ones(2))
        assert torch._C._len_torch_function_stack() == depth + 1 and counter.frame_count == 1
        x = torch.ones(2, device="cuda")
        assert x.is_cuda  # the mode still runs the stand-ins
    assert torch._C._len_torch_function_stack() == depth


def test_dynamo_is_as_before_after_the_session():
    eval_frame = sys.modules["torch._dynamo.eval_frame"]
    builder = sys.modules["torch._dynamo.variables.builder"]
    output_graph = sys.modules["torch._dynamo.output_graph"]
    guards = sys.modules["torch._dynamo.guards"]

    def state():
        return (eval_frame._stance, eval_frame._callback_from_stance,
                eval_frame._maybe_set_eval_frame, vars(builder.VariableBuilder)["_wrap"],
                vars(guards.GuardBuilder)["TENSOR_MATCH"],
                vars(output_graph.OutputGraph)["call_user_compiler"], torch.compile)

    before = state()
    counter = CompileCounter()
    compiled = torch.compile(lambda t: t + 1, backend=counter)
    with PredictSession(Recorder()):
        assert state() != before
        compiled(torch.ones(1))
    assert state() == before
    assert counter.frame_count == 1
    compiled(torch.ones(2, 2))  # and compiles as before, outside
    assert counter.frame_count == 2


# ------------------------------------------------------ a virtual CUDA value: eager, noted


def _closure(counter):
    weights = torch.ones(3, device="cuda")
    return torch.compile(lambda: (weights * 2).sum(), backend=counter)


def _argument(counter):
    x = torch.ones(3, device="cuda")
    compiled = torch.compile(lambda t: (t * 2).sum(), backend=counter)
    return lambda: compiled(x)


GLOBAL_WEIGHTS = None


def _global(counter):
    global GLOBAL_WEIGHTS
    GLOBAL_WEIGHTS = torch.ones(3, device="cuda")
    return torch.compile(lambda: (GLOBAL_WEIGHTS * 2).sum(), backend=counter)


def _module(counter):
    net = torch.nn.Linear(3, 1).cuda()
    compiled = torch.compile(net, backend=counter)
    return lambda: compiled(torch.ones(1, 3, device="cuda")).sum()


def _optimizer(counter):
    net = torch.nn.Linear(3, 1).cuda()
    net(torch.ones(1, 3, device="cuda")).sum().backward()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
    compiled = torch.compile(optimizer.step, backend=counter)
    return lambda: (compiled(), net.weight.sum())[1]


@pytest.mark.parametrize("make", [_closure, _argument, _global, _module, _optimizer],
                         ids=["closure", "argument", "global", "module", "optimizer"])
def test_compiled_code_a_virtual_tensor_reaches_runs_eagerly_with_the_note(make):
    counter = CompileCounter()
    recorder = Recorder()
    with PredictSession(recorder):
        call = make(counter)
        recorder.kinds.clear()  # the module moves
        for _ in range(2):
            result = call()
            assert result.is_cuda
            result.item()
    assert counter.frame_count == 0
    assert recorder.kinds == ["item", "item"]
    (note,) = compile_notes(recorder)
    assert "×2 (a tensor on the virtual CUDA device reaches it)" in note
    assert "predicted op by op" in note


@pytest.mark.parametrize("before", [None, "compile", "session"],
                         ids=["fresh", "a compile before", "a session before"])
def test_the_tracer_catches_a_virtual_tensor_the_walk_missed(monkeypatch, before):
    # Where the walk cannot look (a C extension's state, a name built at run time), the
    # tensor dynamo wraps while it traces is checked: nothing of the frame has run yet.
    # Whatever used dynamo before in the process: dynamo builds its table of wrap functions
    # by type once, on the first value it wraps (VariableBuilder._type_dispatch_impl), and
    # a check put into that table's function after it was built was never asked.
    builder = sys.modules["torch._dynamo.variables.builder"]
    builder.VariableBuilder._type_dispatch_impl.cache_clear()  # as in a fresh process
    if before == "compile":
        assert torch.compile(lambda t: t + 1, backend="eager")(torch.ones(2)).tolist() == [2, 2]
        dynamo.reset()  # which leaves that table as it is
    elif before == "session":
        with PredictSession(Recorder()):
            assert torch.compile(lambda t: t + 1, backend="eager")(torch.ones(2)).tolist() == [2, 2]
        dynamo.reset()
    monkeypatch.setattr(compiles, "_reaches_virtual", lambda registry, call: False)
    _a_virtual_tensor_keeps_the_call_eager()


def _a_virtual_tensor_keeps_the_call_eager():
    """A compiled call that a virtual CUDA tensor reaches (where the walk is told it does
    not) runs eagerly: nothing compiled, its sync predicted, the note says why."""
    counter = CompileCounter()
    recorder = Recorder()
    with PredictSession(recorder):
        x = torch.ones(3, device="cuda")
        compiled = torch.compile(lambda t: (t * 2).sum(), backend=counter)
        assert compiled(x).item() == 6.0
    assert counter.frame_count == 0 and recorder.kinds == ["item"]
    (note,) = compile_notes(recorder)
    assert "(a tensor on the virtual CUDA device reaches it)" in note


def test_the_graph_inputs_are_checked_however_dynamo_wrapped_them(monkeypatch):
    # The second look, at the backend's door: the graph's real inputs (a tensor wrapped by
    # a path the first check does not see still is one of them).
    monkeypatch.setattr(compiles, "_reaches_virtual", lambda registry, call: False)
    monkeypatch.setattr(compiles, "_checking_wrap", lambda session, original: original)
    _a_virtual_tensor_keeps_the_call_eager()


def _reads_a_runtime_name(holder):
    return (getattr(holder, "w" + "x") * 2).sum()


def test_code_compiled_before_the_session_is_traced_again_and_checked(monkeypatch):
    # Compiled outside predict mode with a CPU tensor where the walk cannot look: its
    # guards pass for a virtual CUDA tensor (a CPU tensor of the same dtype and shape), so
    # reused in the session it would run untraced, its syncs lost.
    holder = types.SimpleNamespace(wx=torch.ones(3))
    counter = CompileCounter()
    compiled = torch.compile(_reads_a_runtime_name, backend=counter)
    assert compiled(holder).item() == 6.0 and counter.frame_count == 1
    monkeypatch.setattr(compiles, "_reaches_virtual", lambda registry, call: False)
    recorder = Recorder()
    with PredictSession(recorder):
        assert compiled(holder).item() == 6.0  # CPU: compiled for real (once more)
        assert counter.frame_count == 2 and recorder.kinds == []
        holder.wx = torch.ones(3, device="cuda")
        assert compiled(holder).item() == 6.0
    assert counter.frame_count == 2 and recorder.kinds == ["item"]
    (note,) = compile_notes(recorder)
    assert "(a tensor on the virtual CUDA device reaches it)" in note


def test_a_tensor_that_goes_virtual_after_the_compile_fails_its_guard(monkeypatch):
    # Compiled for real in the session while the tensor was on the host; once it is on the
    # virtual device, the compiled code is not reused for it (a guard asks), and back on
    # the host it is.
    monkeypatch.setattr(compiles, "_reaches_virtual", lambda registry, call: False)
    holder = types.SimpleNamespace(wx=torch.ones(3))
    counter = CompileCounter()
    compiled = torch.compile(_reads_a_runtime_name, backend=counter)
    recorder = Recorder()
    with PredictSession(recorder):
        assert compiled(holder).item() == 6.0 and compiled(holder).item() == 6.0
        assert counter.frame_count == 1 and recorder.kinds == []
        holder.wx = torch.ones(3, device="cuda")
        assert compiled(holder).item() == 6.0
        assert recorder.kinds == ["item"]
        holder.wx = torch.ones(3)
        assert compiled(holder).item() == 6.0
    assert counter.frame_count == 1 and recorder.kinds == ["item"]
    (note,) = compile_notes(recorder)
    assert "(a tensor on the virtual CUDA device reaches it)" in note


def _moves_to_cuda(t):
    return t.cuda().sum().item()


def _makes_on_cuda(t):
    return (torch.zeros(3, device="cuda") + 1).sum().item() + t.sum().item()


def _picks_cuda(t):
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return t.to(device).sum().item()


@pytest.mark.parametrize("code", [_moves_to_cuda, _makes_on_cuda, _picks_cuda],
                         ids=["cuda()", "device=cuda", "is_available"])
def test_code_that_uses_the_cuda_device_falls_back_to_eager(code):
    # CPU inputs, but the code goes to the GPU: compiled on a CPU build it would fail (or,
    # worse, run on the CPU path); run eagerly, its syncs are predicted as on a GPU.
    counter = CompileCounter()
    compiled = torch.compile(code, backend=counter)
    eager, recorder = Recorder(), Recorder()
    with PredictSession(eager):
        expected = code(torch.ones(3))
    with PredictSession(recorder):
        assert compiled(torch.ones(3)) == expected
    assert counter.frame_count == 0
    assert recorder.kinds == eager.kinds and "item" in recorder.kinds
    (note,) = compile_notes(recorder)
    assert "(its code uses the CUDA device)" in note


def test_a_dynamo_first_imported_inside_predict_mode_records_the_real_torch(pytester):
    # In a fresh interpreter, as `syncfree run script.py` or a notebook cell runs: dynamo
    # builds its tables of torch functions at its import; under the session's patches they
    # would hold the stand-ins (for good), and real compiles could not be allowed.
    pytester.makepyfile(first_import="""
        import sys
        import torch
        from syncfree.capture.predict import PredictSession

        class Recorder:
            notes = []
            def note(self, text): self.notes.append(text)
            def record_sync(self, frame, kind=None, *, predicted=False): pass

        with PredictSession(Recorder()):
            assert "torch._dynamo" not in sys.modules
            from torch._dynamo.testing import CompileCounter
            assert torch.cuda.is_available()  # the stand-ins are back after the import
            counter = CompileCounter()
            compiled = torch.compile(lambda t: t + 1, backend=counter)
            assert compiled(torch.ones(2)).tolist() == [2.0, 2.0]
        from torch._dynamo import trace_rules
        assert torch.cuda.synchronize in trace_rules.get_torch_obj_rule_map()
        print("frames", counter.frame_count, "notes", Recorder.notes)
    """)
    result = pytester.runpython(pytester.path / "first_import.py")
    assert result.ret == 0, result.stderr.str()
    result.stdout.fnmatch_lines(["frames 1 notes []"])


def test_a_session_entered_again_decides_again_and_notes_again():
    # pytest --syncfree enters one session object per fixture world, again and again: each
    # entry installs the patches anew, dynamo's hooks and the eager note included.
    counter = CompileCounter()
    compiled = torch.compile(lambda t: (t * 2).sum(), backend=counter)
    recorder = Recorder()
    session = PredictSession(recorder)
    for _ in range(2):
        with session:
            compiled(torch.ones(2, device="cuda")).item()
    assert counter.frame_count == 0 and recorder.kinds == ["item", "item"]
    assert len(compile_notes(recorder)) == 2  # one per entry


def test_a_walk_that_runs_out_of_budget_stays_eager_and_says_so(monkeypatch):
    monkeypatch.setattr(compiles, "_WALK_BUDGET", 3)
    counter = CompileCounter()
    compiled = torch.compile(lambda tensors: sum(t.sum() for t in tensors), backend=counter)
    recorder = Recorder()
    with PredictSession(recorder):
        keep = torch.ones(1, device="cuda")  # something is virtual: the walk runs
        assert compiled([torch.ones(2) for _ in range(8)]).item() == 16.0
        assert keep.is_cuda
    assert counter.frame_count == 0
    (note,) = compile_notes(recorder)
    assert "(too many objects reach it to rule out a virtual CUDA tensor)" in note


# ------------------------------------------- dynamo's table of torch functions (dynamo_tables.py)


def test_a_process_group_started_under_a_watch_leaves_later_compiles_real():
    """torch.distributed's init_process_group clears dynamo's table of torch functions; a compile inside the same watch
    builds it again while predict mode's stand-ins are in torch's place. Once the watch is over the table is built
    again on torch's own functions: a later watch still compiles CPU code for real (in one clean-clone run every
    compile test of an xdist worker ran eagerly after tests/test_distributed.py had started a process group)."""
    import torch.distributed as dist

    from syncfree.capture import SyncRecorder, dynamo_tables

    inside, after = CompileCounter(), CompileCounter()
    with SyncRecorder("predict", cell_files={}):
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
        try:
            torch.compile(lambda t: (t + 1).sum(), backend=inside)(torch.ones(2))
        finally:
            dist.destroy_process_group()
    assert inside.frame_count == 1
    assert not dynamo_tables.stale()
    recorder = Recorder()
    with PredictSession(recorder):
        torch.compile(lambda t: (t * 3).sum(), backend=after)(torch.ones(2))
    assert after.frame_count == 1 and compile_notes(recorder) == []


def test_a_table_built_under_someone_elses_replacement_is_built_again_at_the_start(monkeypatch):
    from torch._dynamo import trace_rules

    from syncfree.capture import dynamo_tables

    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    trace_rules.clear_lru_cache()
    trace_rules.get_torch_obj_rule_map()  # built on the replacement
    monkeypatch.undo()
    assert dynamo_tables.stale()
    counter = CompileCounter()
    recorder = Recorder()
    with PredictSession(recorder):
        torch.compile(lambda t: (t - 1).sum(), backend=counter)(torch.ones(2))
    assert counter.frame_count == 1 and compile_notes(recorder) == []
    assert not dynamo_tables.stale()
