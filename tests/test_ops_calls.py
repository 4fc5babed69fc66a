"""capture/ops_calls.py on the CPU build: a torch.ops call's C++ warnings reach Python while a
recorder owns the thread (tests/gpu/test_cupti_gpu.py counts the syncs on a GPU).

A C++ warning that torch raises on the CPU stands in for debug mode's sync warning: an
``out=`` tensor of the wrong shape ("An output with one or more elements was resized"),
from inside an operator of a namespace of its own (an extension's operators can sync).
"""

from __future__ import annotations

import sys
import warnings
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

from syncfree.capture import dispatch  # noqa: E402
from syncfree.capture.debug import hook, ops_calls  # noqa: E402


@pytest.fixture(scope="module")
def resize_add():
    library = torch.library.Library("syncfree_ops_calls_test", "DEF")
    library.define("resize_add(Tensor a, Tensor b) -> Tensor")
    library.define("fails(Tensor a) -> Tensor")

    def resize_add_kernel(a, b):
        # A C++ warning raised by an operator called through torch.ops, as compiled code's
        # fallback kernels are.
        return torch.ops.aten.add.out(a, b, out=torch.ones(1))

    def fails_kernel(a):
        raise ValueError("from the kernel")

    library.impl("resize_add", resize_add_kernel, "CompositeExplicitAutograd")
    library.impl("fails", fails_kernel, "CompositeExplicitAutograd")
    yield torch.ops.syncfree_ops_calls_test
    library._destroy()


@pytest.fixture
def owned():
    """The thread owned by a (stand-in) recorder with the wrappers installed."""
    recorder = SimpleNamespace(running=True)
    token = dispatch.route(recorder)
    ops_calls.attach(recorder, torch)
    try:
        yield recorder
    finally:
        ops_calls.detach(recorder)
        dispatch.unroute(token, recorder)


def _python_warnings(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in caught if "was resized" in str(w.message)]


def test_a_cpp_warning_of_a_torch_ops_call_is_printed_outside_a_watch(resize_add, capfd):
    # What debug mode met: the warning goes to stderr and Python never sees it.
    result, seen = _python_warnings(lambda: resize_add.resize_add(torch.ones(3), torch.ones(3)))
    assert result.tolist() == [2.0, 2.0, 2.0] and seen == []
    assert "was resized" in capfd.readouterr().err


@pytest.mark.parametrize("call", ["packet", "overload"])
def test_a_cpp_warning_of_a_torch_ops_call_reaches_python_while_a_recorder_owns_it(
        resize_add, owned, capfd, call):
    op = resize_add.resize_add if call == "packet" else resize_add.resize_add.default
    result, seen = _python_warnings(lambda: op(torch.ones(3), torch.ones(3)))
    assert result.tolist() == [2.0, 2.0, 2.0]
    assert len(seen) == 1, seen
    assert "was resized" not in capfd.readouterr().err


def test_an_operator_that_cannot_sync_is_left_alone(owned, capfd):
    result, seen = _python_warnings(lambda: torch.ops.aten.add.out(torch.ones(3), torch.ones(3),
                                                                   out=torch.ones(1)))
    assert result.tolist() == [2.0, 2.0, 2.0] and seen == []
    assert "was resized" in capfd.readouterr().err


def test_the_kernels_exception_passes_through_as_raised(resize_add, owned):
    with pytest.raises(ValueError, match="from the kernel"):
        resize_add.fails(torch.ones(2))


def test_the_operators_that_can_sync():
    assert ops_calls.can_sync("aten::nonzero") and ops_calls.can_sync("aten::_local_scalar_dense")
    assert ops_calls.can_sync("aten::linalg_inv") and ops_calls.can_sync("torchvision::nms")
    assert not ops_calls.can_sync("aten::add") and not ops_calls.can_sync("aten::mm")


def test_the_last_recorder_out_puts_the_originals_back(resize_add):
    import torch._ops

    before = (vars(torch._ops.OpOverload)["__call__"], vars(torch._ops.OpOverloadPacket)["__call__"])
    first, second = SimpleNamespace(running=True), SimpleNamespace(running=True)
    ops_calls.attach(first, torch)
    ops_calls.attach(second, torch)
    assert vars(torch._ops.OpOverload)["__call__"] is not before[0]
    ops_calls.detach(first)
    assert vars(torch._ops.OpOverload)["__call__"] is not before[0]
    ops_calls.detach(second)
    assert (vars(torch._ops.OpOverload)["__call__"],
            vars(torch._ops.OpOverloadPacket)["__call__"]) == before


def test_another_warning_is_shown_at_the_line_that_called_the_operator(resize_add, owned):
    # The warnings come from the wrapper's frame; dispatch's hook shows them at the caller.
    shown = []
    msg = warnings.WarningMessage("An output ... was resized", UserWarning,
                                  hook._OPS_CALLS_FILE, 1)
    frame = sys._getframe()
    hook._at_the_operators_caller_from(msg, frame)
    line = frame.f_lineno - 1
    shown.append((msg.filename, msg.lineno))
    assert shown == [(__file__, line)]
