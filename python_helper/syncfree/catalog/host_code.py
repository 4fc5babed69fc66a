"""Functions of a file that run on the host by construction: the preprocessing half of data processors.

Hugging Face transformers splits the work around a model into classes whose code is CPU work unless the user asks
for a device: image and video processors, feature extractors, tokenizers and multimodal processors turn PIL images,
NumPy arrays, lists and strings into tensors (``torch.from_numpy``, ``torch.as_tensor`` without a device: on the
CPU), and a pipeline's ``preprocess`` gets the raw inputs while its ``postprocess`` gets the model's outputs moved
back to the CPU (``Pipeline.forward`` in transformers/pipelines/base.py: ``_ensure_tensor_on_device(model_inputs,
self.device)`` before ``_forward``, ``_ensure_tensor_on_device(model_outputs, torch.device("cpu"))`` after it).
An ``.item()`` or a boolean mask there syncs only when the user asked the processor for ``device="cuda"``: a
*possible* sync, not a likely one (measured on transformers 5.24: every such finding read by hand was of that kind,
bench/check_precision.py and tests/data/check_precision.json).

The same classes also post-process model outputs (``post_process_object_detection``, ``batch_decode`` of generated
ids, a pipeline's ``_forward``): those tensors are on the model's device, so the line is drawn by the calls the file
shows, not by the class. A function is host code when

- it is reached, through the calls the file shows (``self.method(...)``, ``function(...)``, a ``def`` inside it),
  from a preprocessing entry point: ``__call__``, ``preprocess``, ``_preprocess*``, ``preprocess_*`` of a processor
  class, ``preprocess`` or ``postprocess`` of a pipeline class;
- and no function outside that set calls it (a helper shared with post-processing or with a model stays as it was).

Processor classes are recognized by their bases' names (the file need not import transformers: modular files and
copies subclass each other), and a class deriving from one in the same file is one too.

PyTorch's data pipeline draws the same line (torch/utils/data/dataloader.py): a ``Sampler`` yields the indices the
``DataLoader`` fetches and a ``Dataset`` turns an index into a sample, in the main process or in a worker process,
before ``pin_memory`` and the user's ``.to(device)``. Every method of a sampler class is host code, as is every method
of a ``DataLoader`` subclass (the batches it builds and collates, the graph or table it preprocesses to sample from),
and so is what a dataset's ``__getitem__``, ``__getitems__``, ``__iter__`` and ``__len__`` reach (a batch sampler's
choice weights, a dataset's random crop: CPU tensors made without a device). Those bases count only when the file
imports them from ``torch.utils.data`` (or spells ``torch.utils.data.Sampler``): other libraries' samplers (a language
model's token sampler) run on the GPU.

Data transforms draw it too: a class deriving from a class named ``...Transform`` (torchvision's ``Transform``, and
the transform bases of medical-imaging, graph and augmentation libraries built on the same convention) is applied to a
sample in the dataset's pipeline, on the host, before the user's ``.to(device)``: every method of such a class is host
code, as a sampler's is, and its device is the caller's (measured on monai 1.6 and torch_geometric 2.8: every finding
read by hand in such a class was of that kind). A model's layers are ``nn.Module`` subclasses named after what they
compute, not after a transform base; a class named like a transform that derives from a ``torch.distributions``
transform (a normalizing flow's bijector) or makes parameters, buffers or ``nn`` modules is a model's layer all the
same.

So does a plain class (no base but ``object``) named ``...Transform`` that defines ``__call__``: torchvision's
transform protocol before v2 (``Compose`` calls each on the sample), the frequency-domain and colour augmentations
of self-supervised libraries built the same way; its tensors are the sample's, on the CPU in a ``DataLoader``
pipeline, the GPU only where the user applies it to GPU batches.

Data collators draw it too: a class named ``...Collator`` or deriving from one (``DataCollatorMixin``, a
``...Collator`` base) is the ``collate_fn`` that the ``DataLoader`` calls on the samples its dataset gave, in its
worker, before ``pin_memory`` and the user's ``.to(device)`` (torch/utils/data/_utils/fetch.py): every method of
one is host code, as a sampler's is (the batch's ``labels.tolist()``, a padding count read with ``int()``).

Test code draws it too: a library's test helpers (``gpytorch/test``, ``botorch/utils/testing.py``) and the tests it
ships. Every method of a test case class, named by unittest's convention (``TestCase``, ``BaseTestCase``, a
``...TestCaseMixin``, and the file's subclasses of one), and every top-level ``test_*`` function of a module that
imports pytest or unittest, is host code, with what only they call, where its text names no device (no ``cuda``, no
``device`` but a tensor's own handed along, ``device=log_probs.device``): its tensors are the test's, made on the CPU,
or the caller's (an ``assertAllClose`` of two tensors). A test that names one (a ``cuda=True`` variant that moves its
model) is not, nor is what the walk reaches through it: a sync there is one where the test places its tensors.

A function that imports, in its own body, a library that works on host memory only (a graph, molecule, plotting or
mesh library: ``import networkx as nx`` in ``to_networkx``, ``from rdkit import Chem`` in
``to_smiles``) converts the caller's tensors into that library's objects: the optional dependency imported where it is
used says the function is interop code, and its ``.tolist()`` or ``.cpu()`` syncs only if the caller's data is on the
GPU (measured on torch_geometric 2.8: each such finding read by hand was of that kind); so does a function that
calls such a function of its file by name (a ``visualize_graph`` that picks the networkx or the graphviz drawing).
Libraries that also take the results of a model on the GPU as a rule are not among them: SciPy's assignment solver in
a detection loss, scikit-learn's metrics, pandas (an explainer's table of a model's predictions; cuDF's twin on the GPU); nor are the
readers of images and volumes (PIL, OpenCV, NiBabel...), whose data a function loads and then may move to the GPU (a
dataset's features computed by a CNN on the device).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable

__all__ = ["HostCode"]

# Bases of transformers' preprocessing classes (transformers 5: image_processing_utils.py, image_processing_backends.py,
# video_processing_utils.py, feature_extraction_utils.py, feature_extraction_sequence_utils.py, processing_utils.py,
# tokenization_utils_base.py and the tokenizer backends).
_PROCESSOR_BASES = frozenset(
    {
        "BaseImageProcessor",
        "BaseImageProcessorFast",
        "ImageProcessingMixin",
        "TorchvisionBackend",
        "PilBackend",
        "BaseVideoProcessor",
        "FeatureExtractionMixin",
        "SequenceFeatureExtractor",
        "ProcessorMixin",
        "PreTrainedTokenizerBase",
        "PreTrainedTokenizer",
        "PreTrainedTokenizerFast",
        "TokenizersBackend",
        "SentencePieceBackend",
    }
)
# A model's own processor subclassing another model's (modular files, "Copied from"): DetrImageProcessor,
# Qwen2VLProcessor, WhisperFeatureExtractor, BertTokenizer...
_PROCESSOR_SUFFIXES = (
    "ImageProcessor",
    "ImageProcessorFast",
    "ImageProcessorPil",
    "VideoProcessor",
    "FeatureExtractor",
    "Processor",
    "Tokenizer",
    "TokenizerFast",
)
# Processors of model outputs: logits processors run inside generate() on the model's device.
_NOT_PROCESSORS = ("LogitsProcessor", "LogitsWarper")
_PIPELINE_ROOTS = frozenset({"preprocess", "postprocess"})
# torch/utils/data/sampler.py, distributed.py and dataset.py.
_SAMPLER_BASES = frozenset({"Sampler", "BatchSampler", "SequentialSampler", "RandomSampler", "SubsetRandomSampler",
                            "WeightedRandomSampler", "DistributedSampler"})
_DATASET_BASES = frozenset({"Dataset", "IterableDataset", "TensorDataset", "ConcatDataset", "Subset"})
_DATASET_ROOTS = frozenset({"__getitem__", "__getitems__", "__iter__", "__len__"})
_LOADER_BASES = frozenset({"DataLoader"})

# Libraries of host memory only, by their top-level module: graphs, molecules, plots, meshes.
_HOST_LIBRARIES = frozenset(
    "networkx networkit igraph graphviz rdkit matplotlib seaborn plotly trimesh open3d pyvista gdist".split()
)

Function = ast.FunctionDef | ast.AsyncFunctionDef

# `x.device` of a name other than self/cls (in a test's text, lowered), and `device=` handing it along.
_TENSORS_DEVICE = re.compile(r"(?<![\w.])(?!self\.|cls\.)[a-z_]\w*\.device\b(?!\s*\()")
_PASSED_ALONG = re.compile(r"\bdevice\s*=\s*\0|\0")


def _base_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):  # Generic[...]-style bases
        return _base_name(node.value)
    return ""


def _is_processor_base(name: str) -> bool:
    return name in _PROCESSOR_BASES or (name.endswith(_PROCESSOR_SUFFIXES) and not name.endswith(_NOT_PROCESSORS))


def _is_pipeline_base(name: str) -> bool:
    return name.endswith("Pipeline") and name != "DiffusionPipeline"


def _is_test_case(name: str) -> bool:
    """A test case class by unittest's naming (``TestCase``, ``BaseTestCase``, ``BotorchTestCase``, a
    ``...TestCaseMixin``)."""
    return name.endswith(("TestCase", "TestCaseMixin", "TestCaseMixIn"))


def _test_functions(tree: ast.Module) -> frozenset[str]:
    """The top-level ``test_*`` functions of a module that imports pytest or unittest: the tests they collect."""
    names = frozenset(node.name for node in tree.body
                      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"))
    if names and any(
        (isinstance(node, ast.Import) and any(a.name.partition(".")[0] in ("pytest", "unittest") for a in node.names))
        or (isinstance(node, ast.ImportFrom) and (node.module or "").partition(".")[0] in ("pytest", "unittest"))
        for node in tree.body
    ):
        return names
    return frozenset()


def _is_collator(name: str) -> bool:
    """A data collator (``DataCollatorForLanguageModeling``, a ``DataCollatorMixin`` subclass, ``...Collator``): the
    ``collate_fn`` a ``DataLoader`` calls on a list of samples."""
    return name.endswith(("Collator", "CollatorMixin"))


def _is_transform_base(name: str) -> bool:
    """A data transform's base (``Transform``, ``BaseTransform``, ``MapTransform``...; not ``...Transformer``)."""
    return name.endswith("Transform")


#: What the text of a class that makes parameters, buffers or ``nn`` modules holds (the names the walk below looks for):
#: these words, or ``nn`` as a word of its own (:func:`_names_nn`).
_LAYER_WORDS = ("Parameter", "register_buffer", "register_parameter")


def _names_nn(text: str) -> bool:
    """Whether an ASCII text holds ``nn`` as a word of its own (what ``\\bnn\\b`` finds: str.find and a look at its
    ends, where a pattern that tests a word boundary was tried at each position of the text)."""
    at = text.find("nn")
    while at >= 0:
        before, after = text[at - 1 : at], text[at + 2 : at + 3]
        if not (before.isalnum() or before == "_") and not (after.isalnum() or after == "_"):
            return True
        at = text.find("nn", at + 1)
    return False


def _is_model_layer(node: ast.ClassDef, distributions: set[str], lines: list[str] | None = None) -> bool:
    """A class named like a transform that is a layer of a model: a bijector of ``torch.distributions`` (a normalizing
    flow's layer, on the model's device), or a class that makes parameters, buffers or ``nn`` modules. ``lines``: the
    source's lines as the parser numbers them, when known: a class whose text names none of those is not walked."""
    for base in node.bases:
        if (isinstance(base, ast.Name) and base.id in distributions) or (
            isinstance(base, ast.Attribute) and "distributions" in ast.unparse(base)
        ):
            return True
    if lines is not None:
        first = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)])
        text = "\n".join(lines[first - 1 : node.end_lineno])
        if text.isascii() and not (any(word in text for word in _LAYER_WORDS) or _names_nn(text)):
            # (a non-ASCII name may be another spelling of one)
            return False
    stack: list[ast.AST] = [node]
    while stack:  # every node of the class, as ast.walk finds them (once a class: the answer is kept)
        item = stack.pop()
        if type(item) is ast.Call and type(item.func) is ast.Attribute:  # type: ignore[attr-defined]
            name, owner = item.func.attr, item.func.value  # type: ignore[attr-defined]
            if name in ("Parameter", "register_buffer", "register_parameter") or (
                name[:1].isupper() and isinstance(owner, ast.Name) and owner.id == "nn"
            ):
                return True
        stack.extend(ast.iter_child_nodes(item))  # (not scope's faster child_nodes: scope imports this module)
    return False


def _data_bases(tree: ast.Module) -> dict[str, str]:
    """The names under which the file's top level imports torch.utils.data's sampler and dataset classes, with their
    kind (``from torch.utils.data import Sampler as S``: ``{"S": "sampler"}``)."""
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch.utils.data"):
            for alias in node.names:
                kind = _data_kind(alias.name)
                if kind is not None:
                    found[alias.asname or alias.name] = kind
    return found


def _data_kind(name: str) -> str | None:
    return ("sampler" if name in _SAMPLER_BASES else "dataset" if name in _DATASET_BASES
            else "loader" if name in _LOADER_BASES else None)


def _data_base(node: ast.expr, imported: dict[str, str]) -> str | None:
    """``Sampler[int]`` imported from torch.utils.data, or ``torch.utils.data.Sampler``/``data.Dataset`` spelled out."""
    if isinstance(node, ast.Subscript):
        return _data_base(node.value, imported)
    if isinstance(node, ast.Name):
        return imported.get(node.id)
    if isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Attribute, ast.Name)):
        owner = node.value.attr if isinstance(node.value, ast.Attribute) else node.value.id
        if owner in ("data", "sampler", "dataset", "distributed") and "utils" in ast.unparse(node.value).split("."):
            return _data_kind(node.attr)
    return None


def _is_preprocessing_entry(name: str) -> bool:
    return name in ("__call__", "preprocess") or name.startswith(("_preprocess", "preprocess_"))


class HostCode:
    """Collects, during the static walk, which function defines and calls which; :meth:`functions` then gives the
    host-code functions. Made only for a file that defines a processor, pipeline, sampler or dataset class
    (:meth:`of`)."""

    def __init__(self, kinds: dict[str, str], tests: frozenset[str] = frozenset(), source: str | None = None) -> None:
        # class name -> "processor" | "pipeline" | "sampler" | "dataset" | "loader" | "transform" | "test" (from the
        # bases, in-file subclasses included)
        self._kinds = kinds
        self._tests = tests  # the names of the module's top-level test functions (pytest's, unittest's)
        self._top: set[int] = set()  # ids of the functions defined at the module's top level
        self._source = source
        self._interop: set[int] = set()  # ids of the functions that import a host-only library in their body
        self._class_of: dict[int, ast.ClassDef] = {}
        self._methods: dict[str, list[Function]] = {}  # method name -> methods of that name in processor classes
        self._functions: dict[int, Function] = {}
        self._calls: dict[int, set[int]] = {}  # caller -> callees (ids of function nodes)

    @classmethod
    def of(cls, tree: ast.Module, source: str | None = None) -> HostCode | None:
        """A collector for ``tree``, or None when it defines no processor, pipeline, sampler, dataset or transform
        class at its top level (most files: nothing to collect; the walk makes one when a function imports a
        host-only library, :func:`imports_host_library`)."""
        kinds: dict[str, str] = {}
        changed = True
        classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
        tests = _test_functions(tree)
        if not classes:
            return cls(kinds, tests, source) if tests else None
        data = _data_bases(tree)
        distributions = {alias.asname or alias.name for item in tree.body if isinstance(item, ast.ImportFrom)
                         and "distributions" in (item.module or "") for alias in item.names}
        layers: dict[int, bool] = {}  # class id -> _is_model_layer (asked again at each pass of the loop below)
        lines: list[list[str] | None] = []  # the source's lines, split when a class is first asked about

        def model_layer(node: ast.ClassDef) -> bool:
            found = layers.get(id(node))
            if found is None:
                if not lines:  # (the parser numbers lines at "\n", "\r\n" and "\r" only; splitlines splits at more)
                    lines.append(source.split("\n") if source is not None and "\r" not in source else None)
                found = layers[id(node)] = _is_model_layer(node, distributions, lines[0])
            return found

        while changed:  # in-file subclasses, in any order of definition
            changed = False
            for node in classes:
                if node.name in kinds:
                    continue
                if _is_test_case(node.name):
                    kinds[node.name] = "test"
                    changed = True
                    continue
                if _is_collator(node.name):
                    kinds[node.name] = "collator"
                    changed = True
                    continue
                if (
                    _is_transform_base(node.name)
                    and all(_base_name(base) == "object" for base in node.bases)
                    and any(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) and item.name == "__call__"
                            for item in node.body)
                    and not model_layer(node)
                ):
                    kinds[node.name] = "transform"  # torchvision's protocol: a plain class called on a sample
                    changed = True
                    continue
                for base in node.bases:
                    name = _base_name(base)
                    kind = kinds.get(name) or _data_base(base, data) or (
                        "processor" if _is_processor_base(name) else "pipeline" if _is_pipeline_base(name)
                        else "test" if _is_test_case(name)
                        else "collator" if _is_collator(name)
                        else "transform" if _is_transform_base(name) and not model_layer(node)
                        else None
                    )
                    if kind is not None:
                        kinds[node.name] = kind
                        changed = True
                        break
        return cls(kinds, tests, source) if kinds or tests else None

    def defined(self, node: Function, *, definer: Function | None, owner: ast.ClassDef | None) -> None:
        """``node`` is defined inside ``definer`` (a nested def: reached when its definer is) or directly in the body
        of the class ``owner``."""
        self._functions[id(node)] = node
        if definer is None and owner is None:
            self._top.add(id(node))
        if definer is not None:
            self._calls.setdefault(id(definer), set()).add(id(node))
        if owner is not None and owner.name in self._kinds:
            self._class_of[id(node)] = owner
            self._methods.setdefault(node.name, []).append(node)

    def imported(self, function: Function, node: ast.Import | ast.ImportFrom) -> None:
        """``node`` is an import statement in the body of ``function``."""
        if imports_host_library(node):
            self._interop.add(id(function))

    def called(self, caller: Function | None, call: ast.Call, resolve: Callable[[ast.expr], object]) -> None:
        """Record ``call`` made inside ``caller``: ``self.m(...)``/``cls.m(...)`` (a method of the file's processor
        classes) or ``f(...)`` (``resolve`` gives what the name holds: a function node of this file, or not)."""
        if caller is None:
            return  # module-level code: run once at import, on the host
        func = call.func
        if type(func) is ast.Attribute and type(func.value) is ast.Name and func.value.id in ("self", "cls"):
            targets: Iterable[Function] = self._methods.get(func.attr, ())
        elif type(func) is ast.Name:
            target = resolve(func)
            targets = (target,) if isinstance(target, (ast.FunctionDef, ast.AsyncFunctionDef)) else ()
        else:
            return
        for target in targets:
            self._calls.setdefault(id(caller), set()).add(id(target))

    def functions(self) -> frozenset[int]:
        """Ids of the function nodes that are host code (see the module's docstring)."""
        roots = []
        for key, node in self._functions.items():
            owner = self._class_of.get(key)
            if owner is None:
                if node.name in self._tests and key in self._top and self._places_nothing(node):
                    roots.append(key)  # a test function: its tensors are the test's
                continue
            kind = self._kinds[owner.name]
            if (
                (kind == "processor" and _is_preprocessing_entry(node.name))
                or (kind == "pipeline" and node.name in _PIPELINE_ROOTS)
                or kind in ("sampler", "loader", "transform", "collator")
                or (kind == "test" and self._places_nothing(node))
                or (kind == "dataset" and node.name in _DATASET_ROOTS)
            ):
                roots.append(key)
        # (and so does a function of the file that calls one: `visualize_graph` picks the networkx or the graphviz
        # drawing and hands it the caller's graph)
        interop = self._interop | {caller for caller, callees in self._calls.items() if callees & self._interop}
        reached = self._reach([*roots, *interop])
        if self._tests or "test" in self._kinds.values():
            # a test that names a device (its CUDA variant) is not reached through: what it does, and what it calls,
            # runs where it places its tensors
            placing = {key for key in reached if not self._places_nothing(self._functions[key])}
            if placing:
                reached = self._reach([*(key for key in roots if key not in placing), *interop], placing)
        shared = [callee for caller, callees in self._calls.items() if caller not in reached for callee in callees
                  if callee in reached and callee not in interop]
        return frozenset((reached - self._reach(shared)) | interop)

    def _places_nothing(self, node: Function) -> bool:
        """Whether a test's text names no device (no ``cuda``, no ``device``): its tensors are made on the CPU, where a
        test that runs on the GPU moves them (a ``cuda=True`` variant) and stays as it was."""
        if self._source is None:
            return False
        text = "\n".join(self._source.split("\n")[node.lineno - 1 : node.end_lineno]).lower()
        if "cuda" in text:
            return False
        # `device=log_probs.device`: the device of a tensor the test already has, handed along, places nothing new
        # (`self.device`, a device the test case holds, still does)
        return "device" not in _PASSED_ALONG.sub("", _TENSORS_DEVICE.sub("\0", text))

    def _reach(self, starts: Iterable[int], blocked: set[int] | frozenset[int] = frozenset()) -> set[int]:
        seen = set(starts)
        stack = list(seen)
        while stack:
            for callee in self._calls.get(stack.pop(), ()):
                if callee not in seen and callee not in blocked:
                    seen.add(callee)
                    stack.append(callee)
        return seen


def imports_host_library(node: ast.Import | ast.ImportFrom) -> bool:
    """Whether an import statement imports a host-only library (``import networkx as nx``, ``from rdkit import
    Chem``)."""
    if isinstance(node, ast.ImportFrom):
        modules = [node.module or ""] if not node.level else []
    else:
        modules = [alias.name for alias in node.names]
    return any(module.partition(".")[0] in _HOST_LIBRARIES for module in modules)
