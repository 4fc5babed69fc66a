"""Causes of false findings of ``syncfree check`` on libraries it was not tuned on (issue 40), each as a small snippet
shaped like the code that showed it (not the library's own): where a value comes from and what it is, told from the
file's text alone. tests/test_check_precision.py measures the labelled findings of the libraries themselves."""

from __future__ import annotations

import pytest

from syncfree.analyze import analyze_source


def rules_at(source: str) -> list[tuple[str, int, str]]:
    found = analyze_source("import torch\n" + source, select=["ALL"], possible=True)
    return sorted((f["rule"], f["range"]["line"], f["certainty"]) for f in found)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # A store of `self.betas` on each branch of an if/elif chain of CPU schedules: after it, a CPU tensor, as a
        # name would be (a scheduler's __init__), so a write into what is computed from it copies nothing, whatever
        # another method stores in it later.
        ("class S:\n    def __init__(self, kind: str, n: int, trained=None):\n"
         "        if trained is not None:\n            self.betas = torch.tensor(trained)\n"
         "        elif kind == 'linear':\n            self.betas = torch.linspace(0.1, 0.2, n)\n"
         "        else:\n            raise ValueError(kind)\n"
         "        self.alphas = torch.cumprod(1.0 - self.betas, dim=0)\n        self.alphas[-1] = 2**-24\n"
         "    def load(self, betas):\n        self.betas = betas\n",
         []),
        # ... and what a method called before stored (`self.init_sigmas()` then `self.sigmas[i].item()`), the
        # method walked first; a method that stores the caller's tensor leaves it unknown.
        ("class S:\n    def init_sigmas(self, sigmas: torch.Tensor):\n        self.sigmas = sigmas.to('cpu')\n"
         "    def init_stages(self, sigmas: torch.Tensor):\n        self.init_sigmas(sigmas)\n"
         "        for i in range(3):\n            start = self.sigmas[i].item()\n"
         "    def set_timesteps(self, sigmas: torch.Tensor):\n        self.sigmas = sigmas\n"
         "        return self.sigmas[0].item()\n",
         [("SF101", 11, "likely"), ("SF301", 4, "likely")]),
    ],
)
def test_what_a_method_stores_in_self(source, expected):
    assert rules_at(source) == expected


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # A parameter that takes a list or a tensor, the list made into a tensor without a device: the code is
        # written for host data, the tensor is the caller's; a sync on it is possible, not likely.
        ("def set_sigmas(sigmas):\n    if isinstance(sigmas, list):\n"
         "        s = torch.tensor(sigmas, dtype=torch.float32)\n    elif isinstance(sigmas, torch.Tensor):\n"
         "        s = sigmas.to(dtype=torch.float32)\n    else:\n        raise TypeError(sigmas)\n"
         "    if s[-1].abs().item() > 1e-6:\n        pass\n    t = s.to('cuda')\n    return t[0].item()\n",
         [("SF101", 9, "possible"), ("SF101", 12, "certain")]),
        # ... with a union annotation; and a default made on the CPU when the caller passes none
        ("def blocks(sizes: list[int] | torch.Tensor, weight: torch.Tensor | None = None):\n"
         "    if not isinstance(sizes, torch.Tensor):\n        sizes = torch.tensor(sizes, dtype=torch.long)\n"
         "    if weight is None:\n        weight = torch.ones(sizes.numel())\n"
         "    return sizes.view(-1).tolist(), weight.sum().item()\n",
         [("SF101", 7, "possible"), ("SF204", 7, "possible")]),
        # a CPU tensor on one path and a CUDA one, or one moved to a device the text does not name (a scheduler's
        # timesteps: made on the CPU, moved by set_timesteps(device)), on the other is no host code: likely; a
        # tensor of unknown device on both paths stays likely too
        ("def f(x: torch.Tensor, y: torch.Tensor, flag: bool, device):\n"
         "    a = torch.zeros(3) if flag else torch.zeros(3, device='cuda')\n    b = x if flag else y\n"
         "    c = torch.arange(3) if flag else torch.arange(3).to(device).long()\n"
         "    return a.sum().item(), b.sum().item(), (c == 1).nonzero()\n",
         [("SF101", 6, "likely"), ("SF101", 6, "likely"), ("SF302", 5, "likely"), ("SF602", 6, "likely")]),
    ],
)
def test_a_tensor_on_the_cpu_on_some_paths(source, expected):
    assert rules_at(source) == expected


def test_the_last_line_of_a_call_is_no_target_list():
    """``    self.block_sizes, self.edge_probs, directed=flag)`` ends a call's arguments: counted as a store of
    ``self.block_sizes`` it left the attribute's one real store unbelieved (a store not yet seen), so a CPU tensor
    made in __init__ read as a tensor of unknown device."""
    source = (
        "class D:\n    def __init__(self, sizes: list[int]):\n        self.sizes = torch.tensor(sizes)\n"
        "    def names(self):\n        return self.sizes.view(-1).tolist()\n"
        "    def process(self, f):\n        return f(\n            self.sizes, self.probs, directed=True)\n"
        "    def swap(self, a, b):\n        self.a, self.b = b, a\n"
    )
    assert rules_at(source) == []


def test_a_function_that_imports_a_host_only_library_converts_the_callers_data():
    """An optional dependency imported in the function that uses it, a library of host memory only (a graph or a
    molecule library): the function converts the caller's tensors into its objects, a sync there is possible. pandas
    (a table of a model's predictions) and functions without such an import stay likely."""
    source = (
        "def to_graph(edge_index: torch.Tensor):\n    import networkx as nx\n    g = nx.Graph()\n"
        "    g.add_edges_from(edge_index.t().tolist())\n    return g\n"
        "def to_smiles(x: torch.Tensor):\n    from rdkit import Chem\n    return [Chem.Atom(a) for a in x[:, 0].tolist()]\n"
        "def table(pred: torch.Tensor):\n    import pandas as pd\n    return pd.DataFrame(pred.cpu().numpy())\n"
        "def step(x: torch.Tensor):\n    return x.sum().item()\n"
    )
    assert rules_at(source) == [("SF101", 14, "likely"), ("SF204", 5, "possible"), ("SF204", 9, "possible"),
                                ("SF301", 12, "likely")]


def test_a_bare_container_in_a_union_annotation_is_host_data():
    """``Sequence | torch.Tensor | np.ndarray``: the bare ``Sequence`` (and ``list``) is a container as
    ``Sequence[int]`` is, so the union is a tensor on some paths only, and ``.tolist()`` of it, which NumPy arrays
    have too, is possible (it was unknown: likely)."""
    source = (
        "from collections.abc import Sequence\nimport numpy as np\n"
        "def to_list(data: Sequence | torch.Tensor | np.ndarray) -> list:\n"
        "    return data.tolist() if isinstance(data, (torch.Tensor, np.ndarray)) else list(data)\n"
        "def first(data: list | torch.Tensor):\n    return data[0].item()\n"
    )
    assert rules_at(source) == [("SF101", 7, "likely"), ("SF204", 5, "possible")]
