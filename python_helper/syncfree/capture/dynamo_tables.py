"""Dynamo's table of torch functions, kept built on the functions torch holds.

``torch.compile`` decides how to trace a call of a torch function by looking the function
object up in a table (torch/_dynamo/trace_rules.py, ``get_torch_obj_rule_map``). The table
is built on its first use and cached; ``torch.distributed.init_process_group`` clears it
(and the other caches ``trace_rules.clear_lru_cache`` names), so its next use builds it again
from what ``torch.cuda.synchronize`` and the rest are *then*. Built while syncfree's engines
(or a test's monkeypatch) had replaced them, the table holds the replacements: once they are
put back, compiled code that calls ``torch.cuda.synchronize`` no longer meets a function
dynamo knows, and predict mode would compile nothing for real in the rest of the process.

:func:`drop_stale` clears such a table, so that its next use builds it on the functions
torch holds then. It never imports dynamo.
"""

from __future__ import annotations

import sys


def stale() -> bool:
    """Whether dynamo's table is built and does not hold the ``torch.cuda.synchronize`` torch
    holds now."""
    rules = sys.modules.get("torch._dynamo.trace_rules")
    torch = sys.modules.get("torch")
    table = getattr(rules, "get_torch_obj_rule_map", None)
    if table is None or torch is None:
        return False
    try:
        if not table.cache_info().currsize:
            return False  # not built: its first use builds it on what torch holds then
        return torch.cuda.synchronize not in table()
    except Exception:  # another torch's layout  # noqa: BLE001
        return False


def drop_stale() -> bool:
    """Clear dynamo's cached tables where :func:`stale`; whether it did."""
    if not stale():
        return False
    try:
        sys.modules["torch._dynamo.trace_rules"].clear_lru_cache()
    except Exception:  # noqa: BLE001
        return False
    return True
