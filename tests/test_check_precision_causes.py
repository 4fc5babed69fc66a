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
        # ... with a union annotation; a tensor sized out of nothing on the CPU (`torch.ones(n)`, a model's
        # last-layer path or a default) says nothing of host data: likely
        ("def blocks(sizes: list[int] | torch.Tensor, weight: torch.Tensor | None = None):\n"
         "    if not isinstance(sizes, torch.Tensor):\n        sizes = torch.tensor(sizes, dtype=torch.long)\n"
         "    if weight is None:\n        weight = torch.ones(sizes.numel())\n"
         "    return sizes.view(-1).tolist(), weight.sum().item()\n",
         [("SF101", 7, "likely"), ("SF204", 7, "possible")]),
        # a schedule computed on the CPU from numbers, replaced on one path by a function's result: no tensor to
        # write a number into on the GPU as far as the text tells
        ("def rescale(betas: torch.Tensor) -> torch.Tensor:\n    return 1 - torch.cumprod(1 - betas, dim=0)\n"
         "def make(n: int, zero_snr: bool):\n    betas = torch.linspace(0.1, 0.2, n) ** 2\n"
         "    if zero_snr:\n        betas = rescale(betas)\n    betas[-1] = 2**-24\n",
         []),
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


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # torch.Tensor([...]) is made on the default device (the CPU), as torch.FloatTensor is; moved to a device
        # it is a blocking copy of pageable memory
        ("def f(sigmas: list[float], device):\n    t = torch.Tensor([s * 2 for s in sigmas])\n    t[-1] = 0.5\n"
         "    return torch.Tensor(sigmas).to(device)\n",
         [("SF302", 5, "likely")]),
        # a tensor placed on a device stays placed through arithmetic and a join of two stores (a scheduler's
        # CPU timesteps of __init__, moved by set_timesteps(device) and scaled): `(timesteps == t).nonzero()` likely
        ("import numpy as np\nclass S:\n    def __init__(self, n: int):\n"
         "        self.timesteps = torch.from_numpy(np.arange(n))\n"
         "    def set_timesteps(self, n: int, device):\n"
         "        sigmas = torch.from_numpy(np.linspace(1, 0, n)).to(device=device)\n"
         "        self.timesteps = sigmas * n\n"
         "    def index_for_timestep(self, t, schedule: torch.Tensor | None = None):\n"
         "        if schedule is None:\n            schedule = self.timesteps\n"
         "        return (schedule == t).nonzero()\n",
         [("SF302", 7, "likely"), ("SF602", 12, "likely")]),
        # a CPU tensor moved there on purpose (an MPS fallback) beside the caller's tensor is no host code
        ("def solve(coeffs: torch.Tensor):\n"
         "    work = coeffs.cpu().double() if coeffs.device.type == 'mps' else coeffs.double()\n"
         "    lower = work[:, 0] == 0\n    if bool(lower.any()):\n        pass\n",
         [("SF103", 5, "likely"), ("SF301", 3, "likely")]),
    ],
)
def test_a_tensor_placed_on_a_device_is_not_host_data(source, expected):
    assert rules_at(source) == expected


def test_a_parameter_with_a_numpy_branch_of_its_own_is_the_callers_data():
    """``isinstance(x, np.ndarray)`` in a function, ``x`` its parameter: a NumPy-or-torch utility or a conversion
    between the two, whose tensors are the caller's; a likely sync on ``x`` is possible. ``isinstance(x,
    (torch.Tensor, np.ndarray))`` only checks the type (a model's image sizes pass it on the GPU): likely."""
    source = (
        "import numpy as np\n"
        "def nonzero(x):\n    if isinstance(x, np.ndarray):\n        return np.nonzero(x)[0]\n"
        "    return torch.nonzero(x).flatten()\n"
        "def grid_shape(image_size):\n    if not isinstance(image_size, (torch.Tensor, np.ndarray)):\n"
        "        raise TypeError(image_size)\n    return image_size.tolist()\n"
    )
    found = analyze_source("import torch\n" + source, select=["ALL"], possible=True)
    assert sorted((f["rule"], f["range"]["line"], f["certainty"]) for f in found) == [
        ("SF204", 10, "likely"), ("SF602", 6, "possible")]
    assert "takes NumPy arrays as well as tensors" in next(f["message"] for f in found if f["rule"] == "SF602")


def test_an_image_reader_imported_in_a_function_is_no_host_code():
    """A function that reads images with PIL and computes features on the GPU (a dataset's processing) keeps its
    syncs: image and volume readers feed the device, they are not where its results end."""
    source = (
        "def process(paths, model, device):\n    from PIL import Image\n    out = []\n    for path in paths:\n"
        "        x = torch.from_numpy(np.asarray(Image.open(path))).to(device)\n"
        "        out.append(model(x).to('cpu'))\n    return out\n"
    )
    assert ("SF301", 8, "likely") in rules_at("import numpy as np\n" + source)


def test_np_ndindex_yields_python_ints():
    """``for b, n in np.ndindex(*shape)`` binds Python ints: ``labels[b, n]`` is basic indexing, no index copied to
    the GPU (it was NumPy data: SF501); the comparison of the element read still syncs."""
    source = (
        "import numpy as np\ndef f(points: torch.Tensor, labels: torch.Tensor):\n"
        "    for b, n in np.ndindex(*points.shape[:2]):\n        if labels[b, n] > -1:\n            pass\n"
    )
    assert rules_at(source) == [("SF103", 5, "likely")]


def test_a_device_parameter_annotated_str_is_the_callers_device():
    """``device: str = "cpu"`` names a device as an unannotated ``device`` does: ``torch.tensor(ids, device=device)``
    is on the caller's device, not the CPU, so the processor's later index with it stays a likely sync."""
    source = (
        "class P:\n    def __init__(self, n: int, ids: int | list[int] | torch.Tensor, device: str = 'cpu'):\n"
        "        if not isinstance(ids, torch.Tensor):\n            ids = torch.tensor(ids, device=device)\n"
        "        self.ids = ids\n        self.n = n\n"
        "    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:\n"
        "        out = torch.full_like(scores, -1.0)\n        out[:, self.ids] = 0\n        return out\n"
    )
    assert ("SF502", 10, "likely") in rules_at(source)


def test_a_data_transform_class_is_host_code():
    """A class deriving from a ``...Transform`` base (a dataset's transform, in-file subclasses too) runs on a sample
    in the data pipeline, on the host: its syncs are possible. A model's block deriving from a ``...Transformer`` is
    no transform."""
    source = (
        "from graphs.transforms import BaseTransform\nfrom models import Transformer\n"
        "class Normalize(BaseTransform):\n    def forward(self, data):\n"
        "        return data.pos / data.pos.abs().max().item()\n"
        "class Jitter(Normalize):\n    def __call__(self, pos: torch.Tensor):\n        return self.clip(pos)\n"
        "    def clip(self, pos: torch.Tensor):\n        return pos[pos.norm(dim=-1) < 1]\n"
        "class Block(Transformer):\n    def forward(self, x):\n        return x.sum().item()\n"
    )
    assert rules_at(source) == [("SF101", 6, "possible"), ("SF101", 14, "likely"), ("SF601", 11, "possible")]


def test_an_array_or_tensor_type_is_the_callers_data():
    """A parameter typed by an alias named for arrays and tensors alike (``NdarrayOrTensor``, defined in another
    module) is NumPy data or the caller's tensor: a sync on it, on what is computed from it, on a copy of it, or a copy
    to its device (``x.device``, ``.to(x)``) is possible. Its tensor branch (``isinstance(x, torch.Tensor)``) is still
    the caller's tensor. A parameter typed ``torch.Tensor`` stays likely."""
    source = (
        "import numpy as np\nfrom copy import deepcopy\nfrom imaging.types import NdarrayOrTensor, NdarrayTensor\n"
        "def to_pixels(coords: NdarrayOrTensor, res: int):\n    if isinstance(coords, torch.Tensor):\n"
        "        coords = coords.detach().cpu().numpy()\n    return (coords / res).astype(int)\n"
        "def swap(boxes: NdarrayTensor):\n"
        "    out = boxes.clone() if isinstance(boxes, torch.Tensor) else deepcopy(boxes)\n    return out[:, [1, 0]]\n"
        "def heatmap(points: NdarrayOrTensor, shape: list[int]):\n    device = points.device\n"
        "    out = torch.zeros(shape, device=device)\n    bounds = torch.as_tensor(shape, device=device)\n"
        "    for p in points:\n        if (p < bounds).all():\n            out[p[0], p[1]] += 1\n"
        "    return out[out > 1], torch.as_tensor(shape).to(points)\n"
        "def step(x: torch.Tensor, shape: list[int]):\n"
        "    return torch.as_tensor(shape, device=x.device), x.sum().item()\n"
    )
    assert rules_at(source) == [
        ("SF101", 21, "likely"), ("SF103", 17, "possible"), ("SF301", 7, "possible"), ("SF302", 19, "possible"),
        ("SF401", 15, "possible"), ("SF401", 21, "likely"), ("SF501", 11, "possible"), ("SF601", 19, "possible"),
    ]


def test_a_data_loader_class_is_host_code():
    """A ``torch.utils.data.DataLoader`` subclass builds and collates batches (and preprocesses what it samples from) on
    the host, before the user's ``.to(device)``: its syncs are possible, as a sampler's are."""
    source = (
        "class Loader(torch.utils.data.DataLoader):\n    def __init__(self, edge_index: torch.Tensor, **kwargs):\n"
        "        self.num_nodes = int(edge_index.max()) + 1\n        super().__init__(range(self.num_nodes), **kwargs)\n"
        "def degree(edge_index: torch.Tensor):\n    return int(edge_index.max()) + 1\n"
    )
    assert rules_at(source) == [("SF102", 4, "possible"), ("SF102", 7, "likely")]


def test_a_function_that_calls_an_interop_function_of_its_file_is_interop_code():
    """``visualize(edge_index)`` that hands the caller's graph to the file's networkx drawing converts it for a host-only
    library as that function does: possible. A function calling only functions without such an import stays likely."""
    source = (
        "def _draw(edges: list):\n    import networkx as nx\n    return nx.Graph(edges)\n"
        "def visualize(edge_index: torch.Tensor):\n    return _draw(edge_index.t().tolist())\n"
        "def _count(n):\n    return n\n"
        "def degree(edge_index: torch.Tensor):\n    return _count(edge_index.t().tolist())\n"
    )
    assert rules_at(source) == [("SF204", 6, "possible"), ("SF204", 10, "likely")]


def test_a_test_of_a_tensors_device_places_it_in_each_branch():
    """``if x.is_cuda:`` / ``x.device.type == "cpu"``: the tensor is on the GPU in one branch and off it in the other
    (a CPU path's ``.tolist()`` or ``.cpu()`` copies nothing); where another test beside it may decide the branch
    (``if use_cuda_map and x.is_cuda: ... else: x.cpu()``), the else is possible. A module's ``self.device.type``
    places no tensor."""
    source = (
        "def lookup(query: torch.Tensor, table, use_cuda_map: bool):\n"
        "    if use_cuda_map and query.is_cuda:\n        index = table.get(query)\n"
        "    else:\n        index = table.get(query.cpu())\n    return index\n"
        "def scale(coeffs: torch.Tensor):\n"
        "    if coeffs.device.type == 'cpu':\n        return coeffs.abs().max().tolist()\n"
        "    elif not coeffs.is_cuda:\n        return coeffs.cpu()\n"
        "    else:\n        return coeffs.sum().item()\n"
        "class Exporter:\n    def export(self, x: torch.Tensor):\n"
        "        if self.device.type != 'cuda':\n            return x.sum().item()\n"
    )
    assert rules_at(source) == [("SF101", 14, "certain"), ("SF101", 18, "likely"), ("SF301", 6, "possible")]


def test_code_after_a_device_test_that_returns_has_the_tensor_where_the_test_leaves_it():
    """``if x.device.type != "cpu" or ...: return`` leaves a CPU ``x`` to the code after it (an eager CPU shortcut's
    ``.item()`` copies nothing); ``if use_cuda_map and x.is_cuda: return ...`` leaves it off the GPU only where the
    flag was set (possible). An ``isinstance`` test that returns narrows nothing after it."""
    source = (
        "def shortcut(x: torch.Tensor, n: int) -> bool:\n"
        "    if x.device.type != 'cpu' or n <= 1:\n        return False\n    return x.max().item() > 1\n"
        "def hash_map(key: torch.Tensor, use_cuda_map: bool):\n"
        "    if use_cuda_map and key.is_cuda:\n        return key\n    return key.cpu()\n"
        "def first(x):\n    if not isinstance(x, torch.Tensor):\n        return x\n    return x[0].item()\n"
    )
    assert rules_at(source) == [("SF101", 13, "likely"), ("SF301", 9, "possible")]


def test_a_model_layer_named_like_a_transform_is_no_data_transform():
    """A normalizing flow's bijector (a ``torch.distributions`` transform) and a ``...Transform`` subclass that makes
    parameters or ``nn`` modules are layers of a model, on its device: their syncs stay likely."""
    source = (
        "from torch import nn\nfrom torch.distributions.transforms import Transform\nfrom flows.base import BaseTransform\n"
        "class Flow(Transform):\n    def _call(self, x):\n        return x * x.abs().max().item()\n"
        "class Coupling(BaseTransform):\n    def __init__(self, n: int):\n        self.scale = nn.Parameter(torch.ones(n))\n"
        "    def forward(self, x):\n        return x * self.scale.sum().item()\n"
    )
    assert rules_at(source) == [("SF101", 7, "likely"), ("SF101", 12, "likely")]


def test_a_mask_of_the_callers_array_or_tensor_data_is_possible():
    """``dist[seg.bool()]`` in the tensor branch of ``seg: NdarrayOrTensor``: a mask of the caller's data, a sync only
    where that is a CUDA tensor (possible, not dropped)."""
    source = (
        "from imaging.types import NdarrayOrTensor\n"
        "def surface(seg: NdarrayOrTensor, dist: torch.Tensor):\n"
        "    if isinstance(seg, torch.Tensor):\n        return dist[seg.bool()]\n    return dist\n"
    )
    assert rules_at(source) == [("SF601", 5, "possible")]


def test_a_list_the_code_fills_with_tensors_holds_them_where_they_are():
    """``srcs = []`` then ``srcs.append(t)`` in a loop: a list of ``t``'s device, so ``torch.cat(srcs)`` of CPU
    tensors read from a file is a CPU tensor (a dataset's ``process()``: ``int(src.max())`` copies nothing); a list of
    tensors of unknown device keeps its syncs likely, indexed (``masks[i]``) as well as concatenated."""
    source = (
        "def process(paths):\n    srcs = []\n    for path in paths:\n"
        "        edge = torch.tensor([int(x) for x in open(path).read().split()])\n        srcs.append(edge[::3])\n"
        "    src = torch.cat(srcs, dim=0)\n    return int(src.max())\n"
        "def overlap(pred: torch.Tensor, ids):\n    masks: list[torch.Tensor] = []\n    for i in ids:\n"
        "        masks.append(pred == i)\n    return torch.cat(masks).sum().item(), pred[masks[0] > 0]\n"
        "def mixed(pred: torch.Tensor, n: int):\n    out = []\n    for i in range(n):\n        out.append(i)\n"
        "    out.append(pred)\n    return torch.stack(out).sum().item()\n"
    )
    assert rules_at(source) == [("SF101", 13, "likely"), ("SF101", 19, "likely"), ("SF601", 13, "likely")]


def test_a_parameter_made_a_cpu_tensor_on_one_path_is_the_callers_on_the_other():
    """``if isinstance(nu, Number): nu = torch.tensor(float(nu))``: the code takes numbers as well as tensors, the
    tensors the caller's (a prior's hyperparameter): a sync on it is possible. A parameter replaced on one path by
    something the text does not tell, or a name that is no parameter, stays likely."""
    source = (
        "from numbers import Number\n"
        "def prior(nu, k: torch.Tensor):\n    if isinstance(nu, Number):\n        nu = torch.tensor(float(nu))\n"
        "    if torch.any(nu <= 0):\n        raise ValueError(nu)\n"
        "def other(nu, make):\n    if isinstance(nu, Number):\n        nu = make(nu)\n    return nu.sum().item()\n"
        "def local(make, flag: bool):\n    y = make()\n    if flag:\n        y = torch.tensor([1.0])\n"
        "    return y.sum().item()\n"
    )
    assert rules_at(source) == [("SF101", 11, "likely"), ("SF101", 16, "likely"), ("SF103", 6, "possible")]


def test_a_buffer_registered_from_a_cpu_tensor_is_on_the_cpu_for_the_rest_of_that_method():
    """``self.register_buffer("t", torch.zeros(n))`` moves nothing: the rest of the method that registers it (an
    ``__init__`` filling a transfer matrix) writes a CPU tensor, no sync; the class's other methods see the buffer on
    the module's device (likely), and a buffer made on CUDA is CUDA's (certain)."""
    source = (
        "class Arranger(torch.nn.Module):\n    def __init__(self, m: int, k: int):\n        super().__init__()\n"
        "        self.register_buffer('transf', torch.zeros((m, k)))\n"
        "        self.register_buffer('onto', torch.zeros((m, k), device='cuda'))\n"
        "        for i in range(m):\n            self.transf[i, 0] = 1\n            self.onto[i, 0] = 1\n"
        "    def forward(self, x, i: int):\n        self.transf[i, 0] = 1\n        return x\n"
    )
    assert rules_at(source) == [("SF502", 9, "certain"), ("SF502", 11, "likely")]


def test_each_name_of_a_zip_takes_an_element_of_its_own_iterable():
    """``for s, e in zip(starts, ends)`` over CPU tensors made from a Python list: CPU elements, ``.item()`` copies
    nothing (a layer's __init__ computing slices); over a CUDA tensor, the element is on CUDA (certain), inside an
    ``enumerate`` too."""
    source = (
        "def slices(dims):\n    ends = torch.cumsum(torch.tensor(dims), dim=0)\n"
        "    starts = torch.cat((torch.zeros(1).type_as(ends), ends[:-1]))\n"
        "    return [slice(s.item(), e.item()) for s, e in zip(starts, ends)]\n"
        "def pairs(n: int):\n    a = torch.zeros(n, device='cuda')\n    b = torch.arange(n)\n"
        "    for i, (x, y) in enumerate(zip(a, b)):\n        print(x.item(), y.item())\n"
    )
    assert rules_at(source) == [("SF101", 10, "certain")]


def test_an_augmented_assignment_keeps_a_numpy_array_an_array():
    """``allow &= iou.max(axis=1) <= thr`` on a NumPy mask changes the array in place: whatever the right side is
    (a function of another module), ``allow`` stays an array and its ``.tolist()`` copies nothing; on a name the text
    does not tell, the result stays unknown (likely)."""
    source = (
        "import numpy as np\nfrom elsewhere import box_iou\n"
        "def nms(scores: list, boxes, thr: float):\n    allow = np.array(scores) > thr\n"
        "    allow &= box_iou(boxes).max(axis=1) <= thr\n    return allow.tolist()\n"
        "def other(allow, boxes, thr: float):\n    allow &= box_iou(boxes).max(axis=1) <= thr\n"
        "    return allow.tolist()\n"
    )
    assert rules_at(source) == [("SF204", 10, "likely")]


def test_a_device_parameter_left_out_by_every_call_is_the_default_device():
    """A helper's ``device=None`` that each call of the file (walked before it) leaves out or passes None: its
    tensors are made on the default device, the CPU; one call with another device keeps the finding likely."""
    source = (
        "def main(x: torch.Tensor):\n    a = key([1])\n    b = key([2], device=None)\n"
        "    return make([3.0]), make([4.0], device=x.device)\n"
        "def key(values, *, device=None):\n    return torch.tensor(values, device=device)\n"
        "def make(values, device=None):\n    return torch.tensor(values, device=device)\n"
    )
    assert rules_at(source) == [("SF401", 9, "likely")]


def test_as_tensor_of_the_callers_data_to_the_callers_device_is_possible():
    """``torch.as_tensor(x, device=device)`` where both are the function's parameters (a conversion utility, a
    ``lambda x: torch.as_tensor(x, device=device)`` handed to a helper): the caller's data, a tensor kept where it is
    or host data, to the caller's device: a copy is possible, not likely. A device of the object's own
    (``self.device``: a user's prompt of lists copied to the model's device) or data the function made stays likely."""
    source = (
        "def convert(x, device=None):\n    return torch.as_tensor(x, device=device)\n"
        "def scale(s: list, device=None):\n    return helper(lambda v: torch.diag(torch.as_tensor(v, device=device)))\n"
        "class P:\n    def prompts(self, boxes):\n        return torch.as_tensor(boxes, device=self.device)\n"
        "def made(x, device=None):\n    x = [x, x]\n    return torch.as_tensor(x, device=device)\n"
    )
    assert rules_at(source) == [("SF401", 3, "possible"), ("SF401", 5, "possible"), ("SF401", 8, "likely"),
                                ("SF401", 11, "likely")]


def test_independent_validates_nothing_of_its_own():
    """``Independent(base, n)`` wraps a distribution: no parameter constraints, its log_prob leaves the check to the
    base: no sync of its own (the base's constructor is where the check is); Normal(loc, scale) validates."""
    source = (
        "from torch.distributions import Independent, Normal\n"
        "def kl(p, q, n: int):\n    q = Independent(q.base_dist, n) if n else q.base_dist\n"
        "    return Normal(p.loc, p.scale)\n"
    )
    assert rules_at(source) == [("SF706", 5, "likely")]


def test_a_subclass_method_gets_the_calls_its_base_makes_through_self():
    """``self.decode_log_probs(row)`` in a base class's method reaches each subclass's ``decode_log_probs`` of the
    file: NumPy rows handed to a method annotated ``torch.Tensor`` make its tensors possible (the code takes arrays),
    also through a second method (``partial_decoding``) that gets what the first got; a subclass's method that no
    call of the file reaches keeps its annotation (likely)."""
    source = (
        "class Base(torch.nn.Module):\n    def decode_beams(self, log_probs: torch.Tensor):\n"
        "        rows = log_probs.cpu().numpy()\n"
        "        return [self.decode_log_probs(row, n) for row, n in zip(rows, range(3))]\n"
        "    def decode_log_probs(self, log_probs: torch.Tensor, n: int):\n"
        "        return self.partial_decoding(log_probs, n)\n"
        "    def partial_decoding(self, log_probs: torch.Tensor, n: int):\n        raise NotImplementedError\n"
        "class Searcher(Base):\n    def partial_decoding(self, log_probs: torch.Tensor, n: int):\n"
        "        for col in log_probs[:n]:\n            if col[0] > 0.5:\n                return n\n"
        "    def other(self, scores: torch.Tensor):\n        return scores[0].item()\n"
    )
    assert rules_at(source) == [("SF101", 16, "likely"), ("SF103", 13, "possible"), ("SF301", 4, "likely")]


def test_what_an_object_moved_to_the_cpu_holds_is_on_the_cpu():
    """``boxes = boxes.cpu()`` of an object holding tensors (a detection result, a graph, a batch): the move is the
    sync, and what it holds afterwards (``boxes.xywhn.tolist()``, each row's ``d.cls.item()``, also through
    ``reversed``) is on the CPU: no sync more. Without the move, the rows stay likely."""
    source = (
        "def summary(boxes, names):\n    boxes = boxes.cpu()\n    coords = boxes.xywhn.reshape(len(boxes), -1).tolist()\n"
        "    for d in reversed(boxes):\n        print(names[int(d.cls.item())], coords)\n"
        "    for d in list(boxes):\n        print(float(d.conf.item()))\n"
        "def unmoved(boxes):\n    for d in boxes:\n        print(d.cls.item())\n"
    )
    assert rules_at(source) == [("SF101", 11, "likely"), ("SF301", 3, "likely")]


def test_a_pandas_table_and_a_pil_image_are_host_data():
    """``df = pd.read_csv(path)``: a table in host memory, its columns too; ``df["ID"].tolist()`` copies nothing (a
    recipe's data preparation), nor does a method of it or of a PIL image; a tensor beside it keeps its finding."""
    source = (
        "import pandas as pd\nfrom PIL import Image\n"
        "def load(path, x: torch.Tensor):\n    df = pd.read_csv(path)\n    ids = df['ID'].tolist()\n"
        "    wavs = df.wav.tolist()\n    sizes = df.groupby('spk').size().tolist()\n"
        "    img = Image.open(path).convert('RGB').getdata().tolist()\n    return ids, wavs, sizes, img, x.tolist()\n"
    )
    assert rules_at(source) == [("SF204", 10, "likely")]


def test_what_another_modules_function_gives_for_cpu_tensors_is_on_the_cpu():
    """``loss = ctc_loss(torch.randn(...), [100, 100])`` (a test's data, a dataset's tensors): a function of another
    module given CPU tensors and host data only computes where they are, so ``loss.item()`` copies nothing, and moving
    what it gives to a device is a copy from the CPU (likely); given a tensor of unknown device, an object the text
    does not tell (which may hold one), a device, or no tensor, it stays unknown (likely)."""
    source = (
        "from elsewhere import ctc_loss, rotation\n"
        "def test_loss(compiler):\n    log_probs = torch.randn(4, 100, 30)\n"
        "    loss = ctc_loss(log_probs=log_probs, lengths=[100, 100])\n    assert loss.item() >= 0\n"
        "    with_compiler = ctc_loss(log_probs, compiler)\n    assert with_compiler.item() >= 0\n"
        "def kernel(angle: torch.Tensor, kernel: torch.Tensor):\n"
        "    r = rotation(torch.deg2rad(angle.detach().cpu()))\n    return r.to(kernel.device)\n"
        "def train(x: torch.Tensor, device: torch.device):\n    idx = torch.arange(3)\n"
        "    return ctc_loss(x, idx).item(), ctc_loss(idx, device=device).item(), ctc_loss().item()\n"
    )
    assert rules_at(source) == [("SF101", 8, "likely"), ("SF101", 14, "likely"), ("SF101", 14, "likely"),
                                ("SF101", 14, "likely"), ("SF301", 10, "likely"), ("SF302", 11, "likely")]


def test_a_class_of_another_module_built_from_cpu_tensors_is_no_cpu_tensor():
    """``Net(torch.zeros(3))`` builds an object (a model that may move itself, a graph container), not a tensor
    computed from its arguments: what it gives keeps its finding; a function (``ctc_loss``) computes on the CPU."""
    source = (
        "from elsewhere import Net, ctc_loss\n"
        "def run(x):\n    net = Net(torch.zeros(3))\n    y = net.cuda()(x)\n"
        "    return y.sum().item(), Net(torch.zeros(3)).item(), ctc_loss(torch.zeros(3)).item()\n"
    )
    assert rules_at(source) == [("SF101", 6, "likely"), ("SF101", 6, "likely"), ("SF302", 5, "likely")]


def test_a_body_walked_before_its_callers_is_walked_again_with_their_host_data():
    """Bodies are walked in definition order: a helper defined above its callers learns what they pass only after its
    walk, and a function calling one defined below it reads no return. Where the calls pass host data or a CPU tensor
    (a sampler run on the CPU: ``walk(A.cpu())``; a key made with its device left out, ``device=None``), or where the
    function read before its walk returns host data, the body is walked again with it, and then the bodies that read
    a return that changed (``int(as_key([index]))``). A helper whose callers pass a tensor they do not place stays
    likely."""
    source = (
        "import numpy as np\n"
        "def walk(A):\n    pos = A > 0\n    return A[pos].min().item()\n"
        "def as_key(key, *, device=None):\n    return torch.as_tensor(key, device=device)\n"
        "def other(x):\n    return x.sum().item()\n"
        "def counts(x):\n    return lengths(x).tolist()\n"
        "def select(index, A, x):\n"
        "    return walk(A.cpu()), int(as_key([index])), other(x)\n"
        "def lengths(x):\n    return np.asarray(x)\n"
    )
    assert rules_at(source) == [("SF101", 9, "likely"), ("SF301", 13, "likely")]


def test_a_test_case_that_names_no_device_is_host_code():
    """A library's test helpers and tests (``class BaseTestCase``, its subclasses, a pytest module's ``test_*``
    functions and what only they call) make their tensors on the CPU or compare the caller's: a sync there is
    possible. A test that names a device (a ``cuda=True`` variant) is not, nor what it calls; a CUDA tensor stays
    certain; a function the tests do not reach stays likely."""
    source = (
        "import pytest\n"
        "class BaseTestCase:\n    def assertAllClose(self, a, b):\n        return (a - b).abs().max().item()\n"
        "class KernelTestCase(BaseTestCase):\n"
        "    def test_iter(self):\n        return self._iter(torch.randn(3), cuda=False)\n"
        "    def test_iter_cuda(self):\n        return self._iter(torch.randn(3), cuda=True)\n"
        "    def _iter(self, x, cuda):\n        if cuda:\n            x = x.cuda()\n        return self._norm(x)\n"
        "    def _norm(self, x):\n        return x.norm().item()\n"
        "    def test_on_gpu(self):\n        return torch.zeros(3, device='cuda').sum().item()\n"
        "def test_loss(model):\n    assert model(torch.randn(3)).item() > 0\n"
        "def compute(x):\n    return x.tolist()\n"
    )
    assert rules_at(source) == [("SF101", 5, "possible"), ("SF101", 16, "likely"), ("SF101", 18, "certain"),
                                ("SF101", 20, "possible"), ("SF204", 22, "likely"), ("SF302", 13, "certain")]


def test_numpy_data_with_an_untold_value_is_maybe_an_array():
    """``(x.astype(np.float32) - zero_point) * scale``: NumPy data with values the text does not tell is an array, or a
    tensor only if one of them is one: possible. A name that holds such a value on one path and what the text does
    not tell on the other (``x = interpreter.get_tensor(i)``) is maybe an array too; a tensor beside NumPy data stays
    a tensor, and an untold value alone stays likely."""
    source = (
        "import numpy as np\n"
        "def outputs(interpreter, details, w, t: torch.Tensor):\n    y = []\n    for d in details:\n"
        "        x = interpreter.get_tensor(d['index'])\n"
        "        if d['dtype'] == np.int8:\n            x = (x.astype(np.float32) - d['zero']) * d['scale']\n"
        "        x[:, :, [0, 2]] *= w\n        y.append(x)\n"
        "    return y, (np.ones(3) * t).sum().item(), interpreter.out.sum().item()\n"
    )
    assert rules_at(source) == [("SF101", 11, "likely"), ("SF101", 11, "likely"), ("SF501", 9, "possible")]


def test_a_method_walked_again_keeps_what_the_class_stores():
    """Methods walked again (they read, before its walk, a function's NumPy return) must not count the class's
    ``self.name`` stores twice: ``self.best`` (a CPU tensor, every store of it seen) copied to the device stays a
    blocking copy."""
    source = (
        "import numpy as np\nclass Attack:\n"
        "    def update(self, x):\n        self.device = x.device\n        self.best = x.cpu().clone()\n"
        "        return helper(x).tolist()\n"
        "    def close(self, x):\n        self.current = self.best.to(self.device)\n        return helper(x).tolist()\n"
        "def helper(x):\n    return np.asarray(x)\n"
    )
    assert rules_at(source) == [("SF301", 6, "likely"), ("SF302", 9, "likely")]


def test_a_torch_function_that_gives_a_string_or_a_dtype_formats_no_tensor():
    """``torch.typename(p)`` is a string, ``torch.result_type(a, b)`` a dtype, ``torch.can_cast`` a bool: an f-string
    of them (a container's ``extra_repr``) formats no tensor; ``torch.abs(p)`` in one still does."""
    source = (
        "def extra_repr(p: torch.Tensor, q: torch.Tensor):\n"
        "    kind = p.device.type\n"
        "    a = f'[{torch.typename(p)} of size {p.size()} {kind}]'\n"
        "    b = f'{torch.result_type(p, q)} {torch.can_cast(p.dtype, q.dtype)} {torch.promote_types(p.dtype, q.dtype)}'\n"
        "    return a + b + f'{torch.abs(p)}'\n"
    )
    assert rules_at(source) == [("SF202", 6, "likely")]


def test_a_branch_taken_only_on_another_accelerator_is_possible():
    """``if self.device.type == "mps":`` (or ``in {"mps", "npu"}``, ``str(device) == "xla"``): the branch runs only on
    another accelerator than CUDA (an MPS fallback to the host, a bucketed size for Apple's driver), so what syncs there
    never waits for a CUDA GPU: possible. A CUDA or CPU test, a ``!=`` test and the code after the branch keep theirs."""
    source = (
        "def sizes(self, counts: torch.Tensor, x: torch.Tensor, device):\n"
        "    n = counts.max()\n"
        "    if self.device.type == 'mps':\n        m = 1 << (int(n) - 1).bit_length()\n"
        "    if x.device.type in {'mps', 'npu'} and n is not None:\n        x = x.cpu()\n"
        "    if str(device) == 'xla':\n        print(x.tolist())\n"
        "    if self.device.type == 'cuda':\n        a = int(n)\n"
        "    if self.device.type != 'mps':\n        b = int(n)\n"
        "    return int(n)\n"
    )
    assert rules_at(source) == [("SF102", 5, "possible"), ("SF102", 11, "likely"), ("SF102", 13, "likely"),
                                ("SF102", 14, "likely"), ("SF204", 9, "possible"), ("SF301", 7, "possible")]


def test_an_object_of_a_class_of_the_file_holds_what_its_methods_store():
    """``colors = Colors()`` at the top of a module, then ``colors.palette[[9, 7]]`` in another class: what
    ``Colors.__init__`` stores in ``self.palette`` (a NumPy array) is what the object holds, so indexing it with a list
    and ``.tolist()`` of a row copy nothing. An attribute stored with a tensor of unknown device, or not stored by the
    class, stays as untold as before."""
    source = (
        "import numpy as np\n"
        "class Colors:\n    def __init__(self):\n        self.palette = np.array([[255, 128, 0], [0, 0, 0]])\n"
        "        self.weights = torch.ones(3).to(self.device)\n"
        "colors = Colors()\n"
        "class Annotator:\n    def __init__(self):\n        self.limb = colors.palette[[1, 0]]\n"
        "        self.w = colors.weights[[1, 0]]\n        self.other = colors.unknown[[1, 0]]\n"
        "    def draw(self, i):\n        return self.limb[i].tolist(), self.w.tolist()\n"
    )
    assert rules_at(source) == [("SF204", 14, "likely"), ("SF302", 6, "likely"), ("SF501", 11, "likely"),
                                ("SF501", 12, "likely")]


def test_a_test_that_hands_its_tensors_own_device_along_places_nothing():
    """A pytest test whose only word of a device is its own CPU tensor's handed along (``device=log_probs.device``
    to a graph compiler) makes its tensors on the CPU: host code, possible. ``device=self.device`` (a device the test
    case holds) or ``.to(device)`` still names one."""
    source = (
        "import pytest\nfrom lib import Compiler, loss_of\n"
        "def test_loss():\n    log_probs = torch.randn(4, 100, 30)\n"
        "    compiler = Compiler(device=log_probs.device)\n"
        "    loss = loss_of(log_probs, compiler)\n    assert loss.item() >= 0\n"
        "def test_loss_on(device):\n    log_probs = torch.randn(4, 100, 30).to(device)\n"
        "    loss = loss_of(log_probs, Compiler(device=log_probs.device))\n    assert loss.item() >= 0\n"
    )
    assert rules_at(source) == [("SF101", 8, "possible"), ("SF101", 12, "likely"), ("SF302", 10, "likely")]


def test_a_call_that_leaves_a_functions_device_at_none_gets_a_cpu_tensor():
    """``int(as_key([index]))`` where other calls of ``as_key`` pass a device (so its one return is of no one device):
    given host data and its ``device=None`` left out, it makes its tensor on the default device, the CPU. A call given
    a tensor of unknown device, or a device, stay likely."""
    source = (
        "def as_key(key, *, device=None):\n    return torch.as_tensor(key, device=device)\n"
        "def lookup(x: torch.Tensor, index: int):\n    keys = as_key(x.tolist(), device=x.device)\n"
        "    return int(as_key([index])), int(as_key([index], device=None)), int(as_key(x)),"
        " int(as_key([index], device=x.device))\n"
    )
    assert rules_at(source) == [("SF102", 6, "likely"), ("SF102", 6, "likely"), ("SF204", 5, "likely"),
                                ("SF401", 3, "possible")]


def test_a_tested_tensor_is_named_with_the_statement_that_tests_it():
    """SF103's message names the statement by its keyword (``if``, ``while``, ``assert``, a conditional expression)
    and says that the truth value is needed on the CPU: "the if tests `noise.lt(min_noise).any()` on the CPU" read as
    if the CPU ran the comparison, under a noun ("the if") no user writes."""
    found = analyze_source(
        "import torch\ndef check(noise: torch.Tensor, min_noise: float):\n    if noise.lt(min_noise).any():\n"
        "        pass\n    while noise.sum() > 1:\n        pass\n    return 1 if noise.max() > 0 else 0\n",
        select=["SF103"],
    )
    assert [f["message"] for f in found] == [
        "`if` needs the truth value of `noise.lt(min_noise).any()` on the CPU: it is copied back and the CPU waits "
        "for the GPU",
        "`while` needs the truth value of `noise.sum() > 1` on the CPU: it is copied back and the CPU waits for the GPU",
        "`… if … else …` needs the truth value of `noise.max() > 0` on the CPU: it is copied back and the CPU waits "
        "for the GPU",
    ]


def test_a_device_parameter_of_cpu_default_is_the_callers_choice():
    """``device: str | torch.device = torch.device("cpu")`` handed to the base class's ``__init__`` (which keeps it in
    ``self._device``), or kept by the class itself (``torch.device(device)``, read through a property): the metric's
    state made and moved there (``torch.tensor(0.0, device=self._device)``, ``+= y.sum().to(self._device)``) is on the
    device its user picks, the CPU by default, so its ``.item()`` and masks are possible, with that reason. A device
    of another default (``"auto"``), a model's (an ``nn.Module``'s, or one a model is moved to) and one the file's
    callers pass (``device=x.device``) keep their findings."""
    source = (
        "from torch import nn\nfrom metrics.base import Metric\n"
        "class Pearson(Metric):\n"
        "    def __init__(self, eps: float = 1e-8, device: str | torch.device = torch.device('cpu')):\n"
        "        super().__init__(lambda x: x, device)\n"
        "    def reset(self):\n        self._sum = torch.tensor(0.0, device=self._device)\n        self._n = 0\n"
        "    def update(self, y: torch.Tensor):\n        self._sum += y.sum().to(self._device)\n"
        "        self._n += y.shape[0]\n"
        "    def compute(self):\n        r = self._sum / self._n\n        return r.item(), self._sum[self._sum > 0]\n"
        "class Own:\n    def __init__(self, device='cpu'):\n        self._device = torch.device(device)\n"
        "    @property\n    def device(self):\n        return self._device\n"
        "    def compute(self):\n        return torch.zeros(3, device=self.device).sum().item()\n"
        "class Auto:\n    def __init__(self, device='auto'):\n        self._device = torch.device(device)\n"
        "    def compute(self):\n        return torch.zeros(3, device=self._device).sum().item()\n"
        "class Net(nn.Module):\n    def __init__(self, device: str = 'cpu'):\n        super().__init__()\n"
        "        self.device = device\n"
        "    def forward(self, x):\n        return torch.ones(3).to(self.device)\n"
        "def score(x: torch.Tensor, model, device='cpu'):\n    model = model.to(device)\n"
        "    return torch.zeros(3, device=device).sum().item()\n"
        "def paired(x: torch.Tensor):\n    return _ids(x, device=x.device)\n"
        "def _ids(x: torch.Tensor, device='cpu'):\n    return torch.as_tensor([1, 2], device=device)\n"
    )
    found = analyze_source("import torch\n" + source, select=["ALL"], possible=True)
    assert sorted((f["rule"], f["range"]["line"], f["certainty"]) for f in found) == [
        ("SF101", 15, "possible"), ("SF101", 23, "possible"), ("SF101", 28, "likely"), ("SF101", 37, "likely"),
        ("SF302", 34, "likely"), ("SF401", 8, "possible"), ("SF401", 41, "likely"), ("SF601", 15, "possible"),
    ]
    reasons = {f["range"]["line"] for f in found if f["message"].endswith("(possible: on the device its caller picks, "
                                                                           "the CPU by default)")}
    assert reasons == {8, 15, 23}


def test_a_private_module_object_called_in_the_file_gets_what_its_calls_pass():
    """``self.core = _Core(...)`` then ``self.core(image, target_size=torch.tensor(size))`` (an image transform's
    sizes): a call of an object of a module class of the file reaches its ``forward``, of a plain class its
    ``__call__``; where the class is the module's own (a private name), the calls seen are the calls it gets, so a
    CPU tensor passed there is one in the body. A public class's ``forward`` (called from other files too) and a
    CUDA tensor passed keep their findings."""
    source = (
        "class _Core(torch.nn.Module):\n"
        "    def forward(self, image: torch.Tensor, target_size: torch.Tensor, canvas_size: torch.Tensor):\n"
        "        h, w = target_size.tolist()\n        return canvas_size.tolist()\n"
        "class _Smooth:\n    def __call__(self, n: torch.Tensor):\n        return n.sum().item()\n"
        "class Transform:\n    def __init__(self):\n        self.core = _Core()\n        self.smooth = _Smooth()\n"
        "    def __call__(self, image, size: list):\n"
        "        out = self.core(image, target_size=torch.tensor(size), canvas_size=torch.tensor([4, 4]))\n"
        "        core = _Core()\n        core(image, torch.tensor(size), torch.tensor(size))\n"
        "        return self.smooth(torch.zeros(3)), out\n"
        "class Public(torch.nn.Module):\n    def forward(self, x: torch.Tensor):\n        return x.tolist()\n"
        "class _Gpu(torch.nn.Module):\n    def forward(self, x: torch.Tensor):\n        return x.tolist()\n"
        "def run(x: torch.Tensor):\n    Public()(torch.zeros(3))\n    return _Gpu()(x.cuda())\n"
    )
    assert rules_at(source) == [("SF204", 20, "likely"), ("SF204", 23, "likely"), ("SF302", 26, "likely")]


def test_a_dict_of_cpu_tensors_gives_cpu_tensors():
    """``self.times = {"a": torch.zeros(n), ...}`` (a profiler's timings, an empty dict before): reading an item gives a
    CPU tensor, so a static method handed the items and a CPU tensor reads nothing back from a GPU. A dict whose items
    the class writes (``self.other["b"] = x``), a name's dict given an item of unknown device, and the keys a loop over
    the dict gives keep their findings."""
    source = (
        "class Profiler:\n    def __init__(self):\n        self.times: dict = {}\n        self.flow = torch.zeros(1)\n"
        "        self.other = {}\n"
        "    def _reset(self, n: int):\n        self.times = {'a': torch.zeros(n), 'b': torch.zeros(1)}\n"
        "        self.flow = torch.zeros(n)\n        self.other = {'a': torch.zeros(n)}\n"
        "    def record(self, t: float):\n        self.times['a'][0] = t\n"
        "    def store(self, x: torch.Tensor):\n        self.other['b'] = x\n"
        "    @staticmethod\n    def _stats(data: torch.Tensor):\n        return torch.mean(data).item()\n"
        "    def results(self):\n"
        "        return [self._stats(self.times[k]) for k in self.times], self._stats(self.flow), self.other['b'].item()\n"
        "def local(x: torch.Tensor):\n    d = {'a': torch.zeros(3)}\n    e = {'a': torch.zeros(3)}\n    e['b'] = x\n"
        "    for k in d:\n        k.item()\n    return d['a'].sum().item(), e['a'].sum().item()\n"
    )
    assert rules_at(source) == [("SF101", 19, "likely"), ("SF101", 25, "likely"), ("SF101", 26, "likely")]


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        # A 0-dim CPU integer tensor as an index (flair's `for i in torch.arange(n): states[i]`) is read on the CPU
        # with .item() and selects as an int does (ATen/TensorIndexing.h, applySelect): nothing is copied to the GPU.
        ("x = torch.zeros(8, 4, device='cuda')\nfor i in torch.arange(8):\n    y = x[i]\n", []),
        ("def fill(states: torch.Tensor, n: int):\n    for i in torch.arange(0, n):\n        states[i, :3] = states[0]\n",
         []),
        ("x = torch.zeros(8, 4, device='cuda')\ni = torch.tensor(3)\ny = x[i], x[i, 1]\n", []),
        # ... unpacked from a 1-D tensor too; and as the row of a 2-D destination, a Python number is filled in
        # without a copy (SF502), while a single element takes the copy SF502 reports for `x[0, 0] = 0`
        ("x = torch.zeros(8, 4, device='cuda')\na, b = torch.tensor([1, 2])\nx[a] = 0\nx[b, 0] = 0\n",
         [("SF502", 5, "certain")]),
        # A 1-D CPU index tensor is copied to the GPU, a blocking copy (measured: index_cpu_idx), and so is the row
        # of a 2-D one, or an index whose dimensions the text does not tell.
        ("x = torch.zeros(8, 4, device='cuda')\ni = torch.tensor([1, 2])\ny = x[i]\nx[i] = 0\n",
         [("SF501", 4, "certain"), ("SF501", 5, "certain")]),
        ("x = torch.zeros(8, 4, device='cuda')\nfor row in torch.zeros(2, 3, dtype=torch.long):\n    y = x[row]\n",
         [("SF501", 4, "certain")]),
        ("x = torch.zeros(8, 4, device='cuda')\ndef f(i, j: torch.Tensor):\n    k = torch.tensor(i)\n"
         "    return x[k], x[j.cpu()]\n",
         [("SF301", 5, "likely"), ("SF501", 5, "certain"), ("SF501", 5, "certain")]),
    ],
)
def test_a_0_dim_cpu_index_is_read_on_the_cpu(source, expected):
    assert rules_at(source) == expected


def test_a_device_made_the_cpu_when_none_is_the_callers_choice():
    """A device parameter of an ``__init__`` made the CPU when the caller leaves it None (``torch.device(device) if
    device is not None else torch.device("cpu")``, ``torch.device(device or "cpu")``, ``if device is None: device =
    "cpu"``), kept in ``self.device`` and read by the class or by a subclass of the file: the object's tensors are on
    the device its user picks, the CPU by default (torchrl's physics backends). Not so where the object's state takes
    the caller's data as it is (``self.loss_sum += loss * n``: timm's evaluators, on the model output's device), nor
    a helper function's ``device=None`` (what each call passes), nor in an ``nn.Module``."""
    source = (
        "from torch import nn\n"
        "class Backend:\n"
        "    def __init__(self, *, num_envs: int, device: torch.device | None):\n"
        "        self.device = torch.device(device) if device is not None else torch.device('cpu')\n"
        "class Torch(Backend):\n"
        "    def init(self, m):\n"
        "        limits = torch.as_tensor(m.ctrlrange, device=self.device)\n"
        "        return limits.sum().item()\n"
        "class Env:\n"
        "    def __init__(self, device=None):\n"
        "        if device is None:\n            device = torch.device('cpu')\n"
        "        self._device = device\n"
        "    def done(self):\n        return torch.tensor(False, device=self._device)\n"
        "class Evaluator:\n"
        "    def __init__(self, device=None):\n        self.device = torch.device(device or 'cpu')\n"
        "        self.loss_sum = torch.zeros((), device=self.device)\n"
        "    def update(self, output, target, criterion):\n"
        "        self.loss_sum += criterion(output, target).float() * output.shape[0]\n"
        "    def compute(self):\n        return self.loss_sum.item(), _rows(self.device)\n"
        "def _rows(device):\n    return torch.tensor([1, 2], device=device)\n"
        "def helper(n, device=None):\n    device = device or 'cpu'\n"
        "    return torch.tensor([n], device=device)\n"
        "class Net(nn.Module):\n    def __init__(self, device=None):\n        super().__init__()\n"
        "        self.dev = torch.device(device or 'cpu')\n"
        "    def forward(self, x):\n        return torch.tensor([1.0], device=self.dev)\n"
    )
    found = analyze_source("import torch\n" + source, select=["ALL"], possible=True)
    assert sorted((f["rule"], f["range"]["line"], f["certainty"]) for f in found) == [
        ("SF101", 9, "possible"), ("SF101", 24, "likely"), ("SF401", 8, "possible"), ("SF401", 16, "possible"),
        ("SF401", 26, "likely"), ("SF401", 29, "likely"), ("SF401", 35, "likely"),
    ]


def test_a_compute_function_handed_to_the_base_beside_a_cpu_default_device():
    """An epoch metric's compute function, handed uncalled to the base class's ``__init__`` beside a device parameter
    of CPU default (``super().__init__(roc_auc_compute_fn, ..., device=device)``, or the function a helper of the file
    returns, ``_get_tau(variant)``): the base (in another module) calls it on the outputs it keeps on that device, the
    CPU unless the user asks for another, so its ``.cpu()`` copies are possible. A function the file also calls, or
    one handed beside a device of no CPU default, keeps its findings."""
    source = (
        "from metrics.epoch_metric import EpochMetric\n"
        "def auc_fn(y_preds: torch.Tensor, y_targets: torch.Tensor) -> float:\n"
        "    return score(y_targets.cpu().numpy(), y_preds.cpu().numpy())\n"
        "def _get_tau(variant='b'):\n"
        "    def _tau(predictions, targets):\n"
        "        return tau(predictions.flatten().cpu().numpy(), targets.cpu().numpy())\n"
        "    return _tau\n"
        "def other_fn(y_preds, y_targets):\n    return y_preds.cpu()\n"
        "def called_fn(y_preds, y_targets):\n    return y_preds.cpu()\n"
        "class AUC(EpochMetric):\n"
        "    def __init__(self, output_transform=lambda x: x, device=torch.device('cpu')):\n"
        "        super().__init__(auc_fn, output_transform=output_transform, device=device)\n"
        "class Tau(EpochMetric):\n"
        "    def __init__(self, variant='b', device='cpu'):\n"
        "        super().__init__(_get_tau(variant), None, True, device)\n"
        "class Other(EpochMetric):\n"
        "    def __init__(self, device='cuda'):\n"
        "        super().__init__(other_fn, device=device)\n"
        "class Called(EpochMetric):\n"
        "    def __init__(self, device='cpu'):\n"
        "        super().__init__(called_fn, device=device)\n"
        "    def check(self, a, b):\n        return called_fn(a, b)\n"
    )
    found = analyze_source("import torch\n" + source, select=["ALL"], possible=True)
    assert sorted((f["rule"], f["range"]["line"], f["certainty"]) for f in found) == [
        ("SF301", 4, "possible"), ("SF301", 4, "possible"), ("SF301", 7, "possible"), ("SF301", 7, "possible"),
        ("SF301", 10, "likely"), ("SF301", 12, "likely"),
    ]


def test_a_cuda_device_of_a_formatted_index():
    """``f"cuda:{rank}"`` names a CUDA device whose index is worked out at run time: a tensor moved or made there is
    on the GPU (``self._device`` holding it too), a copy there blocks. A formatted string of another shape
    (``f"cuda: {n} devices"``, a message) names none."""
    source = (
        "def f(x, rank):\n"
        "    y = x.to(f'cuda:{rank}')\n"
        "    z = torch.zeros(3, device=torch.device(f'cuda:{rank}'))\n"
        "    return z.sum().item(), y.sum().item(), f'cuda: {rank} devices'\n"
        "class A:\n"
        "    def __init__(self, gpu):\n        self._device = f'cuda:{gpu}'\n"
        "    def g(self):\n        t = torch.tensor([1, 2], device=self._device)\n        return t.sum().item()\n"
    )
    assert rules_at(source) == [
        ("SF101", 5, "certain"), ("SF101", 5, "certain"), ("SF101", 11, "certain"), ("SF302", 3, "likely"),
        ("SF401", 10, "certain"),
    ]


def test_an_empty_tensor_copies_nothing():
    """``torch.tensor([], device=d)``: no element, no copy (ATen's ``copy_`` returns before any transfer when the
    tensor has no elements); a tensor of one element or more on the same device still copies."""
    source = (
        "def f(labels, device):\n"
        "    empty = torch.tensor([], device=labels.device, dtype=torch.long)\n"
        "    none = torch.tensor((), device=device)\n"
        "    one = torch.tensor([0], device=device)\n"
        "    return empty, none, one\n"
    )
    assert rules_at(source) == [("SF401", 5, "likely")]


def test_zip_strict_pairs_each_iterable():
    """``for row, mask in zip(ids_cpu, masks_cpu, strict=True)``: each name takes an element of its own iterable,
    as without ``strict`` (rows of ``.cpu()`` copies, trimmed and read with ``.tolist()`` on the host)."""
    source = (
        "def f(input_ids, attention_mask, lengths):\n"
        "    ids_cpu = input_ids.detach().cpu()\n"
        "    masks_cpu = attention_mask.detach().cpu().bool()\n"
        "    out = []\n"
        "    for row, mask, length in zip(ids_cpu, masks_cpu, lengths, strict=True):\n"
        "        out.append((row[mask].tolist(), length.item()))\n"
        "    return out\n"
    )
    assert rules_at(source) == [("SF101", 7, "likely"), ("SF301", 3, "likely"), ("SF301", 4, "likely")]


def test_a_list_in_self_of_cpu_copies_holds_cpu_tensors():
    """``self.preds = []`` and only ``self.preds.append(p.cpu())`` in the class's text: a list of CPU tensors, so
    ``torch.cat(self.preds)`` in another method is a CPU tensor (a validation epoch's kNN predictions). A list that
    also takes the GPU tensor, or is extended, or whose appends the walk has not all seen when it is read (a method
    above the one that appends), holds what the text does not tell."""
    source = (
        "class Bench:\n"
        "    def __init__(self):\n        self._preds = []\n        self._gpu = []\n        self._more = []\n"
        "    def step(self, feature):\n"
        "        p = feature.argmax(1)\n"
        "        self._preds.append(p.cpu())\n        self._gpu.append(p.cpu())\n        self._gpu.append(p)\n"
        "        self._more.append(p.cpu())\n        self._more.extend(feature)\n"
        "    def end(self):\n"
        "        acc = torch.cat(self._preds, dim=0).float().mean()\n"
        "        if acc > 0.5:\n            print(acc.item())\n"
        "        if torch.cat(self._gpu).sum() > 0 or torch.cat(self._more).sum() > 0:\n            pass\n"
        "        self._preds.clear()\n"
        "class Early:\n"
        "    def end(self):\n"
        "        if torch.cat(self._preds).sum() > 0:\n            pass\n"
        "    def __init__(self):\n        self._preds = []\n"
        "    def step(self, p):\n        self._preds.append(p.cpu())\n"
    )
    assert rules_at(source) == [
        ("SF103", 18, "likely"), ("SF103", 18, "likely"), ("SF103", 23, "likely"), ("SF301", 9, "likely"),
        ("SF301", 10, "likely"), ("SF301", 12, "likely"), ("SF301", 28, "likely"),
    ]


def test_a_tuple_returned_by_an_annotated_function_of_the_file():
    """``embeddings, labels, names = load(path)`` of a function of the file annotated ``-> Tuple[NDArray[np.float64],
    List[int], List[str]]``: a part the annotation says is host data (an array) is host data, so ``.tolist()`` of its
    rows copies nothing; a part it says is a tensor stays what unpacking the call gave (unknown), as before."""
    source = (
        "from typing import List, Tuple\nimport numpy as np\nfrom numpy.typing import NDArray\n"
        "def load(path: str) -> Tuple[NDArray[np.float64], List[int], torch.Tensor]:\n"
        "    return np.loadtxt(path), [], torch.load(path)\n"
        "def as_dict(path):\n"
        "    embeddings, labels, weights = load(path)\n"
        "    rows = [e.tolist() for e, l in zip(embeddings, labels)]\n"
        "    return rows, weights.tolist()\n"
    )
    assert rules_at(source) == [("SF204", 10, "likely")]


def test_a_plain_transform_class_and_a_collator_are_host_code():
    """A plain class named ``...Transform`` that defines ``__call__`` (torchvision's transform protocol, a frequency
    mask applied to each image) and a data collator (``...Collator``, a ``DataCollatorMixin`` subclass: a
    ``DataLoader``'s ``collate_fn``) run on samples in the data pipeline, on the host: their syncs are possible. A
    plain class so named without ``__call__`` (a helper of a model), one that makes ``nn`` modules, and a class named
    like neither keep theirs."""
    source = (
        "from torch import nn\nfrom transformers.data.data_collator import DataCollatorMixin\n"
        "class MaskTransform:\n    def __call__(self, image):\n"
        "        mask = torch.rand(image.shape[1:], device=image.device) > 0.5\n"
        "        return image * mask, mask.sum().item()\n"
        "class PadCollator(DataCollatorMixin):\n    def torch_call(self, features):\n"
        "        batch = torch.stack(features)\n        return batch, batch.sum().item()\n"
        "class ShapeTransform:\n    def apply(self, x):\n        return x.sum().item()\n"
        "class LayerTransform:\n    def __init__(self):\n        self.proj = nn.Linear(2, 2)\n"
        "    def __call__(self, x):\n        return self.proj(x).sum().item()\n"
        "class Mask:\n    def __call__(self, image):\n        return image.sum().item()\n"
    )
    assert rules_at(source) == [
        ("SF101", 7, "possible"), ("SF101", 11, "possible"), ("SF101", 14, "likely"), ("SF101", 19, "likely"),
        ("SF101", 22, "likely"),
    ]


def test_a_slice_bound_that_is_a_tensor_on_some_paths_only_is_possible():
    """``idx = (np.array(self.iters) < skip_start).sum()`` then ``self.iters[idx:]``: NumPy data compared with a
    value the text does not tell is an array, or a tensor only if that value is one, so a slice by it is as sure as
    that (possible), as ``idx.item()`` already was; a bound known to be a tensor keeps the slice likely."""
    source = (
        "import numpy as np\n"
        "def plot(iters, values, skip_start=5):\n"
        "    idx = (np.array(iters) < skip_start).sum()\n"
        "    return iters[idx:], values[idx:], idx.item()\n"
        "def cut(idx: 'int | torch.Tensor', x: torch.Tensor, t: torch.Tensor):\n"
        "    return x[idx:t.sum()], x[:idx]\n"
    )
    assert rules_at(source) == [
        ("SF101", 5, "possible"), ("SF503", 5, "possible"), ("SF503", 5, "possible"), ("SF503", 7, "likely"),
        ("SF503", 7, "possible"),
    ]


def test_a_private_torch_predicate_gives_a_python_bool():
    """``torch._has_compatible_shallow_copy_type(a, b)`` returns a Python bool, as ``torch.is_...`` functions do:
    an ``if`` on it reads no tensor. Not every private torch function does: ``torch._is_all_true(t)`` gives a
    tensor."""
    source = (
        "def swap(param, meta):\n"
        "    if torch._has_compatible_shallow_copy_type(param, meta):\n        return 1\n"
        "    if torch._is_all_true(param):\n        return 2\n"
    )
    assert rules_at(source) == [("SF103", 5, "likely")]


def test_code_for_another_accelerator_in_a_function_of_its_own_is_possible():
    """``def get_max_musa_memory(device)`` (a word of its name names another accelerator than CUDA: MUSA, NPU,
    Neuron, XLA...), a branch under ``if is_npu_available():`` or ``torch.xpu.is_available()``, and ``elif rng_type ==
    RNGType.XLA:``: that accelerator's code, which its callers (often in another module) reach only on it, so what
    syncs there never waits for a CUDA GPU: possible. A CUDA helper, ``is_cuda_available()``, ``RNGType.CUDA`` and a
    word inside another (``samples``) keep theirs."""
    source = (
        "def get_max_musa_memory(device=None):\n"
        "    mem = torch.tensor([1], device=device)\n    return int(mem.item())\n"
        "def _neuron_broadcast(t: torch.Tensor):\n    return t.cpu()\n"
        "def get_max_cuda_memory(t: torch.Tensor):\n    return int(t.item())\n"
        "def gather_samples(t: torch.Tensor):\n    return t.tolist()\n"
        "def sync(rng_type, t: torch.Tensor):\n"
        "    if is_npu_available():\n        a = t.item()\n"
        "    if torch.xpu.is_available():\n        b = t.item()\n"
        "    if is_cuda_available():\n        c = t.item()\n"
        "    if rng_type == RNGType.CUDA:\n        d = t.item()\n"
        "    elif rng_type == RNGType.XLA:\n        e = t.item()\n"
        "    elif rng_type == DistributedType.MULTI_NPU:\n        f = t.item()\n"
    )
    found = analyze_source("import torch\n" + source, select=["ALL"], possible=True)
    assert sorted((f["rule"], f["range"]["line"], f["certainty"]) for f in found) == [
        ("SF101", 4, "possible"), ("SF101", 8, "likely"), ("SF101", 13, "possible"), ("SF101", 15, "possible"),
        ("SF101", 17, "likely"), ("SF101", 19, "likely"), ("SF101", 21, "possible"), ("SF101", 23, "possible"),
        ("SF204", 10, "likely"), ("SF301", 6, "possible"), ("SF401", 3, "possible"),
    ]
    assert "in `def get_max_musa_memory`, named for another accelerator" in next(
        f["message"] for f in found if f["range"]["line"] == 4)


def test_a_method_annotated_to_return_arrays_fills_the_attributes_it_is_unpacked_into():
    """``self.data_bytes, self.data_address = self._serialize_data()`` of a method of the class annotated ``->
    Tuple[np.ndarray, np.ndarray]`` (on every store): the attributes hold NumPy arrays for the class's other methods,
    so ``self.data_address[idx].item()`` reads no tensor. A part annotated a tensor, and a method a class of the file
    overrides (its override may return anything), keep their findings."""
    source = (
        "import numpy as np\n"
        "from typing import Tuple\n"
        "class Dataset:\n"
        "    def full_init(self):\n"
        "        self.data_bytes, self.data_address = self._serialize_data()\n"
        "    def subset(self, indices):\n"
        "        self.data_bytes, self.data_address = self._get_subset(indices)\n"
        "    def _serialize_data(self) -> Tuple[np.ndarray, np.ndarray]:\n"
        "        return np.zeros(3), np.cumsum(np.ones(3))\n"
        "    def _get_subset(self, indices) -> Tuple[np.ndarray, np.ndarray]:\n"
        "        return np.zeros(3), np.cumsum(np.ones(3))\n"
        "    def get(self, idx):\n"
        "        start = self.data_address[idx - 1].item()\n"
        "        return self.data_bytes[start:self.data_address[idx].item()]\n"
        "class Model:\n"
        "    def setup(self):\n"
        "        self.weights, self.bias = self._make()\n"
        "    def _make(self) -> Tuple[torch.Tensor, torch.Tensor]:\n"
        "        return torch.ones(3, device='cuda'), torch.zeros(3, device='cuda')\n"
        "    def read(self):\n"
        "        return self.weights.sum().item()\n"
        "class Loader:\n"
        "    def setup(self):\n"
        "        self.a, self.b = self._make()\n"
        "    def _make(self) -> Tuple[np.ndarray, np.ndarray]:\n"
        "        return np.zeros(3), np.ones(3)\n"
        "    def read(self):\n"
        "        return self.a[0].item()\n"
        "class CudaLoader(Loader):\n"
        "    def _make(self):\n"
        "        return torch.ones(3, device='cuda'), torch.ones(3, device='cuda')\n"
    )
    assert rules_at(source) == [("SF101", 22, "likely"), ("SF101", 29, "likely")]


def test_an_isinstance_test_of_numpy_or_python_scalar_classes_narrows_to_host_data():
    """``elif isinstance(value, np.generic): return value.item()`` (a logger's converter of the user's values): in
    that branch ``value`` is a NumPy scalar, and ``isinstance(x, (int, float))`` makes it a Python number, so
    ``.item()`` there reads no tensor. A tuple with ``torch.Tensor``, the other branch, and a container class (a list
    may hold tensors) keep their findings."""
    source = (
        "import numpy as np\n"
        "def to_param(value):\n"
        "    if isinstance(value, (dict, list)):\n        return [to_param(v) for v in value]\n"
        "    elif isinstance(value, (torch.Tensor, np.ndarray)):\n        return value.tolist()\n"
        "    elif isinstance(value, np.generic):\n        return value.item()\n"
        "    return value\n"
        "def scalar(x):\n"
        "    if isinstance(x, (int, float)):\n        return float(x) + x.item()\n"
        "    if not isinstance(x, np.number):\n        return x.item()\n"
        "    return x\n"
        "def items(x):\n"
        "    if isinstance(x, (list, tuple)):\n        return x[0].item()\n"
    )
    assert rules_at(source) == [("SF101", 15, "likely"), ("SF101", 19, "likely"), ("SF204", 7, "likely")]
