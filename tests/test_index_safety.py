"""Every PyTorch API pytest-msprobe calls with index arguments, fed hostile indices (negative, huge,
10^12, shapes that do not match) as a dump can carry them: the process never crashes and no
result holds memory from outside its inputs.

Each API runs as the plugin runs it: resolved from msprobe's lists (apis.py), its index
arguments checked first (frameworks/index_checks.py), called only when they pass. Hypothesis
draws the cases in a child process (a segfault must not take pytest with it); the child writes
the case it is about to run before running it, so a crash names its API and indices.

Run alone: python tests/test_index_safety.py [API ...]
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = 25  # hypothesis examples an API
SECONDS = 3  # and no more than this an API, once LEAST have run
LEAST = 10
HUGE = [-(2**63), -(10**12), -(2**31) - 1, -1, 2**31, 10**12, 2**63 - 1]


def _cases() -> dict[str, Callable[[Any], tuple[dict, dict]]]:
    """API name -> (index tensor -> (arguments by parameter name, keyword arguments)); the index
    takes the place of the API's first index argument, every other argument is a sane one."""
    import torch

    def f(*shape: int) -> torch.Tensor:
        return torch.rand(*shape) + 1  # in [1, 2]: a value from elsewhere in memory shows

    def along(extra: dict | None = None, source: bool = False, dim: int = 1) -> Callable:
        def make(idx: torch.Tensor) -> tuple[dict, dict]:
            named = {"input": f(3, 4), "dim": dim, "index": idx}
            if source:
                named["src"] = named["source"] = f(*(idx.shape if idx.dim() else (1,))) if idx.numel() < 64 else f(1)
            named["value"] = 1.0
            return named, dict(extra or {})

        return make

    def plain(**named: Any) -> Callable:
        def make(idx: torch.Tensor) -> tuple[dict, dict]:
            return {key: idx if value is None else value for key, value in named.items()}, {}

        return make

    def embedding_bag(idx: torch.Tensor) -> tuple[dict, dict]:
        # The hostile tensor as the offsets where it is 1-D and short, else as the indices.
        if idx.dim() == 1 and idx.numel() <= 4:
            return {
                "input": torch.tensor([0, 1, 2, 4]),
                "indices": torch.tensor([0, 1, 2, 4]),
                "weight": f(5, 3),
                "offsets": idx,
            }, {}
        return {"input": idx, "indices": idx, "weight": f(5, 3), "offsets": torch.tensor([0, 1])}, {}

    def ctc(idx: torch.Tensor) -> tuple[dict, dict]:
        log_probs = f(10, 2, 5).log_softmax(2)
        if idx.dim() == 1 and idx.numel() == 2:  # as the input lengths
            return {
                "log_probs": log_probs,
                "targets": torch.tensor([[1, 2], [3, 4]]),
                "input_lengths": idx,
                "target_lengths": torch.tensor([2, 2]),
            }, {"zero_infinity": True}
        targets = idx.reshape(2, -1) if idx.numel() % 2 == 0 and idx.numel() else torch.tensor([[1, 2], [3, 4]])
        return {
            "log_probs": log_probs,
            "targets": targets,
            "input_lengths": torch.tensor([10, 10]),
            "target_lengths": torch.tensor([targets.shape[1]] * 2),
            "blank": 0,
        }, {"zero_infinity": True}

    def nll(idx: torch.Tensor) -> tuple[dict, dict]:
        return {
            "input": f(3, 5).log(),
            "self": f(3, 5).log(),
            "target": idx.reshape(-1)[:3] if idx.numel() >= 3 else idx,
            "weight": None,
            "reduction": 2,
            "ignore_index": -100,
        }, {}

    def nll_backward(idx: torch.Tensor) -> tuple[dict, dict]:
        target = idx.reshape(-1)[:3] if idx.numel() >= 3 else idx
        return {
            "grad_output": torch.tensor(1.0),
            "self": f(3, 5),
            "target": target,
            "weight": None,
            "reduction": 2,
            "ignore_index": -100,
            "total_weight": torch.tensor(3.0),
        }, {}

    def pooling(dims: int, adaptive: bool) -> Callable:
        def make(idx: torch.Tensor) -> tuple[dict, dict]:
            spatial = (4,) * dims
            out = tuple(idx.shape[-dims:]) if idx.dim() >= dims + 2 else (2,) * dims
            grad = f(1, 1, *out)
            named = {
                "grad_output": grad,
                "self": f(1, 1, *spatial),
                "indices": idx
                if idx.dim() >= dims + 2
                else idx.reshape(-1)[:1].reshape((1, 1) + (1,) * dims)
                if idx.numel()
                else idx,
            }
            if not adaptive:
                named.update(
                    kernel_size=[2] * dims, stride=[2] * dims, padding=[0] * dims, dilation=[1] * dims, ceil_mode=False
                )
            if named["indices"].shape != grad.shape:
                named["grad_output"] = f(*named["indices"].shape) if named["indices"].numel() < 4096 else grad
            return named, {}

        return make

    def unpool(dims: int) -> Callable:
        def make(idx: torch.Tensor) -> tuple[dict, dict]:
            shape = (1, 1) + (2,) * dims
            indices = (
                idx.reshape(-1)[: 2**dims].reshape(shape)
                if idx.numel() >= 2**dims
                else torch.zeros(shape, dtype=torch.int64)
            )
            return {
                "self": f(*shape),
                "indices": indices,
                "output_size": [4] * dims,
                "stride": [2] * dims,
                "padding": [0] * dims,
            }, {}

        return make

    def dense_backward(idx: torch.Tensor) -> tuple[dict, dict]:
        rows = idx.numel() if idx.numel() < 64 else 1
        return {
            "grad_output": f(rows, 3),
            "grad": f(rows, 3),
            "indices": idx.reshape(-1)[:rows],
            "num_weights": 5,
            "padding_idx": -1,
        }, {"scale_grad_by_freq": False} if False else {}

    def renorm(idx: torch.Tensor) -> tuple[dict, dict]:
        return {"input": f(5, 3), "indices": idx}, {"max_norm": 1.0, "norm_type": 2.0}

    return {
        "gather": along(),
        "scatter": along(source=True),
        "scatter_": along(source=True),
        "scatter_add": along(source=True),
        "scatter_add_": along(source=True),
        "scatter_reduce": along({"reduce": "sum"}, source=True),
        "scatter_reduce_": along({"reduce": "sum"}, source=True),
        "index_select": along(dim=0),
        "index_add": along(source=True, dim=0),
        "index_add_": along(source=True, dim=0),
        "index_copy": along(source=True, dim=0),
        "index_copy_": along(source=True, dim=0),
        "index_reduce": along({"reduce": "prod"}, source=True, dim=0),
        "index_reduce_": along({"reduce": "prod"}, source=True, dim=0),
        "index_fill": along(dim=0),
        "index_fill_": along(dim=0),
        "take": plain(input=f(3, 4), index=None),
        "put": lambda idx: ({"input": f(3, 4), "index": idx, "source": f(*idx.shape) if idx.dim() else f(1)[0]}, {}),
        "put_": lambda idx: ({"input": f(3, 4), "index": idx, "source": f(*idx.shape) if idx.dim() else f(1)[0]}, {}),
        "take_along_dim": lambda idx: ({"input": f(3, 4), "indices": idx, "dim": 1 if idx.dim() == 2 else None}, {}),
        "embedding": lambda idx: ({"input": idx, "indices": idx, "weight": f(5, 3)}, {}),
        "embedding_bag": embedding_bag,
        "_embedding_bag": embedding_bag,
        "_embedding_bag_forward_only": embedding_bag,
        "embedding_dense_backward": dense_backward,
        "embedding_backward": lambda idx: (dense_backward(idx)[0], {}),
        "embedding_renorm_": renorm,
        "ctc_loss": ctc,
        "_ctc_loss": ctc,
        "nll_loss": nll,
        "cross_entropy": nll,
        "nll_loss_forward": nll,
        "nll_loss_backward": nll_backward,
        "nll_loss2d_forward": lambda idx: (
            {
                "self": f(1, 5, 2, 2).log(),
                "target": idx.reshape(1, 2, 2) if idx.numel() == 4 else idx,
                "weight": None,
                "reduction": 2,
                "ignore_index": -100,
            },
            {},
        ),
        "nll_loss2d_backward": lambda idx: (
            {
                "grad_output": torch.tensor(1.0),
                "self": f(1, 5, 2, 2),
                "target": idx.reshape(1, 2, 2) if idx.numel() == 4 else idx,
                "weight": None,
                "reduction": 2,
                "ignore_index": -100,
                "total_weight": torch.tensor(4.0),
            },
            {},
        ),
        "multi_margin_loss": lambda idx: (
            {"input": f(3, 5), "self": f(3, 5), "target": idx.reshape(-1)[:3] if idx.numel() >= 3 else idx},
            {},
        ),
        "multilabel_margin_loss": lambda idx: (
            {"input": f(2, 5), "target": idx.reshape(2, 5) if idx.numel() == 10 else idx},
            {},
        ),
        "multilabel_margin_loss_forward": lambda idx: (
            {"self": f(2, 5), "target": idx.reshape(2, 5) if idx.numel() == 10 else idx, "reduction": 1},
            {},
        ),
        "one_hot": lambda idx: ({"tensor": idx, "num_classes": 4}, {}),
        "max_pool2d_with_indices_backward": pooling(2, adaptive=False),
        "max_pool3d_with_indices_backward": pooling(3, adaptive=False),
        "adaptive_max_pool2d_backward": pooling(2, adaptive=True),
        "adaptive_max_pool3d_backward": pooling(3, adaptive=True),
        "max_unpool2d": unpool(2),
        "max_unpool3d": unpool(3),
        # Public APIs with no rule of index_checks: their kernels check their own indices.
        "max_unpool1d": lambda idx: (
            {
                "input": f(1, 1, 2),
                "indices": idx.reshape(1, 1, -1)[..., :2]
                if idx.numel() >= 2
                else torch.zeros(1, 1, 2, dtype=torch.int64),
                "kernel_size": 2,
            },
            {},
        ),
        "bincount": lambda idx: ({"input": idx.reshape(-1)[:8].clamp(max=10**6)}, {}),
        "index_put": lambda idx: (
            {"input": f(3, 4), "indices": (idx,), "values": torch.tensor(1.0)},
            {"accumulate": True},
        ),
        "index_put_": lambda idx: (
            {"input": f(3, 4), "indices": (idx,), "values": torch.tensor(1.0)},
            {"accumulate": True},
        ),
        "__getitem__": lambda idx: ({"input": f(3, 4), "index": idx}, {}),
    }


# APIs without an index_checks rule whose kernels check their indices; (type, params) as they are called.
UNRULED = {
    ("Functional", "max_unpool1d"): "input indices kernel_size",
    ("Functional", "max_unpool2d"): "input indices kernel_size",
    ("Functional", "max_unpool3d"): "input indices kernel_size",
    ("Torch", "bincount"): "input",
    ("Tensor", "bincount"): "input",
    ("Torch", "index_put"): "input indices values",
    ("Tensor", "index_put"): "input indices values",
    ("Tensor", "index_put_"): "input indices values",
    ("Tensor", "__getitem__"): "input index",
    ("Aten", "index_put"): "input indices values",
}


def listed_apis() -> list[tuple[str, str, str]]:
    """(type, API, its parameters) of every API pytest-msprobe would call with index arguments."""
    from pytest_msprobe.frameworks.index_checks import RULES

    found = [(t, name, api.params) for t, table in RULES.items() for name, api in table.items()]
    return sorted(found + [(t, name, params) for (t, name), params in UNRULED.items()])


def child(only: list[str], progress: Path) -> int:
    """Run every API's cases here; write each case to `progress` before it runs."""
    from pytest_msprobe.frameworks import Unsupported
    from pytest_msprobe.frameworks.pytorch import resolve_torch

    cases = _cases()
    report: dict[str, dict[str, int]] = {}
    with progress.open("w", encoding="utf-8") as log:
        for api_type, name, params in listed_apis():
            label = f"{api_type}.{name}"
            if only and name not in only and label not in only:
                continue
            try:
                fn = resolve_torch(api_type, name)
            except Unsupported:
                report[label] = {"not listed or absent": 1}
                continue
            counts = report.setdefault(label, {"refused": 0, "ran": 0, "raised": 0})
            _examples(fn, cases[name], label, params, counts, log)()
    print(json.dumps(report))
    return 0


def _examples(fn: Any, case: Callable, label: str, params: str, counts: dict, log: Any) -> Callable[[], None]:
    """One API's hypothesis test: hostile index tensors, checked as the plugin checks them, then called."""
    import torch
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from pytest_msprobe.frameworks import index_checks

    # Mostly inside a small tensor (the kernels run), else a little or far outside it.
    values = st.one_of(st.integers(0, 3), st.integers(-6, 6), st.sampled_from(HUGE))
    shapes = st.sampled_from(
        [(), (1,), (2,), (3,), (4,), (10,), (2, 2), (3, 2), (1, 1, 2, 2), (1, 1, 3, 3), (1, 1, 2, 2, 2)]
    )
    started = time.monotonic()

    @settings(
        max_examples=EXAMPLES, deadline=None, database=None, derandomize=True, suppress_health_check=list(HealthCheck)
    )
    @given(shape=shapes, data=st.data())
    def run(shape: tuple, data: Any) -> None:
        n = math.prod(shape)
        flat = data.draw(st.lists(values, min_size=n, max_size=n))
        if sum(counts.values()) >= LEAST and time.monotonic() - started > SECONDS:
            return
        idx = torch.tensor(flat, dtype=torch.int64).reshape(shape)
        named, kwargs = case(idx)
        args = []
        for param in params.split():
            if param not in named:
                break
            args.append(named[param])
        log.write(json.dumps({"api": label, "indices": flat, "shape": list(shape)}) + "\n")
        log.flush()
        if index_checks.refusal(f"{label}.0.forward", args, kwargs):
            counts["refused"] += 1
            return
        try:
            out = fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - the kernel's own refusal: what is wanted
            counts["raised"] += 1
            return
        counts["ran"] += 1
        inputs = [t for t in (*args, *kwargs.values()) if isinstance(t, torch.Tensor) and t.is_floating_point()]
        bound = 1 + sum(float(t.abs().sum()) for t in inputs)  # 10^33 from a foreign heap shows
        for o in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(o, torch.Tensor) and o.is_floating_point() and o.numel():
                finite = o[torch.isfinite(o)]
                assert not bool(o.isnan().any()), (label, flat, "NaN")
                assert not finite.numel() or float(finite.abs().max()) <= bound, (label, flat, o)

    return run


def run_child(tmp_path: Path, only: list[str]) -> tuple[subprocess.CompletedProcess, Path]:
    progress = tmp_path / "progress.jsonl"
    done = subprocess.run(
        [sys.executable, __file__, "--progress", str(progress), *only],
        capture_output=True,
        text=True,
        timeout=170,
        cwd=ROOT,
    )
    return done, progress


@pytest.mark.slow  # a child process
def test_hostile_indices_crash_nothing(tmp_path):
    """No API crashes the process or hands back memory from outside its inputs; every API with a
    rule refuses the hostile cases before its kernel sees them."""
    done, progress = run_child(tmp_path, [])
    lines = progress.read_text(encoding="utf-8").splitlines() if progress.exists() else []
    assert done.returncode >= 0, f"signal {-done.returncode} at {lines[-1] if lines else '?'}"
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    ran = {label: counts for label, counts in report.items() if "not listed or absent" not in counts}
    # The kernels the issue names are among them, and every one was tried and refused some.
    for label in (
        "Aten.max_pool2d_with_indices_backward",
        "Aten.adaptive_max_pool3d_backward",
        "Functional.ctc_loss",
        "Torch.embedding_bag",
    ):
        assert ran[label]["refused"] > 0, (label, ran.get(label))
    assert len(ran) >= 60, sorted(ran)


def test_reshape_alias_is_never_called():
    """A view over raw sizes and strides reads whatever lies past its storage: off the allow-list."""
    from pytest_msprobe.dumps import apis
    from pytest_msprobe.frameworks import Unsupported

    for api in ("_reshape_alias", "_sparse_coo_tensor_with_dims_and_tensors"):
        with pytest.raises(Unsupported, match="unchecked kernel"):
            apis.listed(apis.PYTORCH, "Aten", api)


def _spec(shape: list[int], dtype: str = "torch.float32", low: float | None = -1.0, high: float | None = 1.0, **extra):
    return {"type": "torch.Tensor", "dtype": dtype, "shape": shape, "Min": low, "Max": high, **extra}


def _ints(*values: int) -> list[dict]:
    return [{"type": "int", "value": v} for v in values]


# Entries whose index argument is drawn from (Min, Max): (entry, body with the index spec last-made
# by `index(low, high)`, field of the index, its valid range, values also taken).
def _entries(low: float | None, high: float | None) -> list[tuple[str, dict, int, tuple[int, int], set[int]]]:
    def index(shape: list[int]) -> dict:
        return _spec(shape, "torch.int64", low, high)

    return [
        ("Functional.embedding.0.forward", {"input_args": [index([6]), _spec([5, 3])]}, 0, (0, 4), set()),
        (
            "Aten.max_pool2d_with_indices_backward.default.0.forward",
            {
                "input_args": [
                    _spec([1, 1, 2, 2]),
                    _spec([1, 1, 4, 4]),
                    _ints(2, 2),
                    _ints(2, 2),
                    _ints(0, 0),
                    _ints(1, 1),
                    {"type": "bool", "value": False},
                    index([1, 1, 2, 2]),
                ]
            },
            7,
            (0, 15),
            set(),
        ),
        ("Functional.cross_entropy.0.forward", {"input_args": [_spec([4, 7]), index([4])]}, 1, (0, 6), {-100}),
        (
            "Functional.ctc_loss.0.forward",
            {"input_args": [_spec([10, 2, 5]), index([2, 3]), _spec([2], "torch.int64", 10, 10)]},
            1,
            (0, 4),
            set(),
        ),
        (
            "Torch.gather.0.forward",
            {"input_args": [_spec([3, 4]), {"type": "int", "value": 1}, index([3, 2])]},
            2,
            (0, 3),
            set(),
        ),
    ]


BOUNDS = st.one_of(st.none(), st.integers(-(10**13), 10**13), st.sampled_from([-100, 0, 1, 4, 5, 15, 16, 2**62]))


@settings(max_examples=60, deadline=None)
@given(low=BOUNDS, high=BOUNDS, seed=st.integers(0, 2**32))
def test_random_indices_are_drawn_inside_what_they_index(low, high, seed):
    """Random indices lie inside the tensor they index (and inside the recorded [Min, Max]), the
    same on every rebuild; where the statistics leave no index inside, the entry is refused
    naming the field and the bound."""
    import torch

    from pytest_msprobe.frameworks.torch_engine import CODEC
    from pytest_msprobe.inputs.rebuild import InputError, Rebuilder

    if low is not None and high is not None and low > high:
        low, high = high, low
    for entry, body, position, (first, last), extras in _entries(low, high):
        try:
            rebuilt = Rebuilder(CODEC, entry, Path("."), "random", seed).rebuild(body)
        except InputError as exc:
            assert f"{entry}: input_args[{position}]: indices in [" in str(exc), str(exc)
            assert f"outside [{first}, {last}]" in str(exc)
            # Refused only where the recorded range holds no valid index.
            assert (
                (low is not None and low > last)
                or (high is not None and high < first)
                or (low is not None and high is not None and low == high)
            ), (entry, low, high, str(exc))
            continue
        drawn = rebuilt.args[position]
        assert isinstance(drawn, torch.Tensor) and drawn.dtype == torch.int64
        values = set(drawn.reshape(-1).tolist())
        assert all(first <= v <= last or v in extras for v in values), (entry, low, high, values)
        if low is not None and high is not None:
            assert all(low <= v <= high for v in values), (entry, low, high, values)
        again = Rebuilder(CODEC, entry, Path("."), "random", seed).rebuild(body)
        assert torch.equal(drawn, again.args[position])


def test_indices_inside_are_drawn_as_before():
    """Statistics a real run records (inside the range) give the very tensors they gave before."""
    import numpy as np

    from pytest_msprobe.frameworks.torch_engine import CODEC
    from pytest_msprobe.inputs.rebuild import Rebuilder, random_array, tensor_seed

    entry = "Functional.embedding.0.forward"
    body = {"input_args": [_spec([48], "torch.int64", 0, 4), _spec([5, 3])]}
    rebuilt = Rebuilder(CODEC, entry, Path("."), "random", 3).rebuild(body)
    before = random_array(body["input_args"][0], "i", tensor_seed(3, entry, "input_args[0]"))
    assert np.array_equal(rebuilt.args[0].numpy(), before) and rebuilt.notes == []


def test_an_ignore_index_and_offsets_are_drawn_as_a_run_has_them():
    """cross_entropy's Min -100 (ignore_index) is kept, the rest drawn among the classes (uniform in
    [-100, 6] made 94% invalid targets); embedding_bag's offsets start at 0 and never decrease."""
    from pytest_msprobe.frameworks.torch_engine import CODEC
    from pytest_msprobe.inputs.rebuild import Rebuilder

    body = {"input_args": [_spec([64, 7]), _spec([64], "torch.int64", -100, 6)]}
    target = Rebuilder(CODEC, "Functional.cross_entropy.0.forward", Path("."), "random", 0).rebuild(body).args[1]
    assert -100 in target.tolist() and all(0 <= v <= 6 for v in target.tolist() if v != -100)
    bag = {"input_args": [_spec([9], "torch.int64", 0, 4), _spec([5, 3]), _spec([4], "torch.int64", 0, 9)]}
    offsets = Rebuilder(CODEC, "Functional.embedding_bag.0.forward", Path("."), "random", 0).rebuild(bag).args[2]
    assert offsets[0] == 0 and bool((offsets[1:] >= offsets[:-1]).all()) and int(offsets.max()) <= 9


def test_real_indices_outside_are_refused(tmp_path):
    """A tensor dump's index file is data too: the entry is refused before its kernel sees it."""
    import torch

    from pytest_msprobe.frameworks.torch_engine import CODEC
    from pytest_msprobe.inputs.rebuild import InputError, Rebuilder

    torch.save(torch.tensor([[[[0, 1], [2, -1]]]]), tmp_path / "indices.pt")
    torch.save(torch.tensor([[[[0, 1], [2, 15]]]]), tmp_path / "fine.pt")
    entry = "Aten.adaptive_max_pool2d_backward.default.0.forward"

    def body(name: str) -> dict:
        index = _spec([1, 1, 2, 2], "torch.int64", 0, 15, data_name=name)
        return {"input_args": [_spec([1, 1, 2, 2]), _spec([1, 1, 4, 4]), index]}

    with pytest.raises(
        InputError,
        match=r"adaptive_max_pool2d_backward.default.0.forward: input_args\[2\]: "
        r"indices in \[-1, 2\], outside \[0, 15\], the 4x4 plane of self",
    ):
        Rebuilder(CODEC, entry, tmp_path, "auto", 0).rebuild(body("indices.pt"))
    assert Rebuilder(CODEC, entry, tmp_path, "auto", 0).rebuild(body("fine.pt")).args[2].tolist() == [
        [[[0, 1], [2, 15]]]
    ]


def test_every_index_argument_of_the_allow_list_is_decided():
    """Each allow-listed PyTorch API that takes an index tensor is denied, checked by index_checks,
    or a kernel that checks its own (fed by the test above): none left to chance (the study's table)."""
    sys.path.insert(0, str(ROOT))
    from bench.studies.index_safety import audit

    rows = audit()
    assert [row for row in rows if row[0] == "UNREVIEWED"] == []
    decided = {api: what for what, api, _ in rows}
    assert decided["Aten.max_pool2d_with_indices_backward"] == "checked"
    assert decided["Aten._reshape_alias"] == "denied (unchecked kernel)"
    assert decided["Functional.ctc_loss"] == decided["Torch.embedding_bag"] == "checked"


if __name__ == "__main__":
    arguments = sys.argv[1:]
    where = Path(arguments[arguments.index("--progress") + 1]) if "--progress" in arguments else Path("progress.jsonl")
    names = [a for i, a in enumerate(arguments) if a != "--progress" and (i == 0 or arguments[i - 1] != "--progress")]
    sys.path.insert(0, str(ROOT))
    sys.exit(child(names, where))
