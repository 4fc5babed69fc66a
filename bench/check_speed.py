"""``syncfree check`` speed on large files: prints the time for a 10,000-line file of mixed PyTorch code (2,000
consecutive ``.item()`` reads among it) and for the same file doubled, and whether doubling at most doubled it.

    PYTHONPATH=python_helper .venv/bin/python bench/check_speed.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python_helper"))

from syncfree.analyze import analyze_source  # noqa: E402

MIXED = """\
y{i} = x @ w
z{i} = torch.relu(y{i}) + b
if z{i}.sum() > 0:
    m{i} = z{i}[z{i} > 0]
n{i} = torch.nonzero(m{i})
print(f"step {{z{i}.mean()}}")
q{i} = z{i}.cpu().numpy()
r{i} = torch.tensor([1.0, 2.0], device="cuda")
"""


def mixed_file(lines: int, reads: int) -> str:
    head = "import torch\nx = torch.randn(64, 64, device='cuda')\nw = torch.randn(64, 64, device='cuda')\nb = x[0]\n"
    item_run = "".join(f"v{i} = x[{i % 64}, 0].item()\n" for i in range(reads))
    body = []
    count, i = 0, 0
    while count < lines - reads - 4:
        body.append(MIXED.format(i=i))
        count += MIXED.count("\n")
        i += 1
    middle = len(body) // 2
    return head + "".join(body[:middle]) + item_run + "".join(body[middle:])


def timed(source: str) -> float:
    start = time.perf_counter()
    analyze_source(source)
    return time.perf_counter() - start


def main() -> int:
    small, large = mixed_file(10_000, 2_000), mixed_file(20_000, 4_000)
    timed(mixed_file(500, 100))  # warm: imports and the catalog
    t_small, t_large = min(timed(small) for _ in range(2)), min(timed(large) for _ in range(2))
    ratio = t_large / t_small
    print(f"syncfree check: {small.count(chr(10)):,} lines {t_small:.2f} s; {large.count(chr(10)):,} lines "
          f"{t_large:.2f} s; doubling x{ratio:.2f}")
    ok = t_small < 2.0 and ratio <= 2.2
    print("OK: under 2 s and linear" if ok else "SLOW: over 2 s or worse than linear")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
