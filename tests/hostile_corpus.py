"""A corpus of hostile dumps, written beside good ones: what an attacker (or a broken tool) can put
in a dump.json and its folder, and what pytest-msprobe must make of each.

`build(root, marks)` writes the corpus under root and returns what each bad thing must give.
Anything that would run code writes (or asks a shell to write) a file in `marks`: after a run,
`marks` must be empty. The good entries come from the shipped real dumps (pt_stats_L1,
pt_tensor_L1, ms_stats_L1), so every one of them must get the row a clean run gives it.

Folders under root:
- stats/   pt_stats_L1 (statistics: random data) + the API, name, input and parse cases
- tensor/  pt_tensor_L1 (tensor: real data, or recorded outputs) + the API, name and file cases
- ms/      ms_stats_L1 (MindSpore statistics) + MindSpore's API cases
- clean_stats/, clean_tensor/, clean_ms/: the same good dumps untouched, to compare rows with
- file_*/  one whole-file case each (a FIFO, a header of the wrong type, a file that is no JSON)
- layouts/ small dumps unpacked with conftest.py, __init__.py and test modules in and above their
  folders (CODE_LAYOUTS): none may be imported
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from conftest import DUMPS

MAX_ELEMENTS = 1_000_000  # --msprobe-max-elements of the corpus runs: above every good entry


@dataclass
class Case:
    """One bad entry: what it tries, its name in the dump, its body, what its row must say."""

    what: str
    entry: str
    body: Any  # an entry body, or RawJson
    says: str  # a part of its row's Message: the entry or field, and why
    row: str = ""  # the row's API Name when it is not the entry's prefix (names that are no API name)

    @property
    def api(self) -> str:
        return self.row or self.entry.rsplit(".", 1)[0]


@dataclass
class RawJson:
    """A body written as it is (JSON the json module would not write: depth, duplicates)."""

    text: str


@dataclass
class FileCase:
    """A whole dump.json that is bad: its folder, and what the run must say about it (and where)."""

    what: str
    folder: str
    says: str
    where: str = "result"  # "result": an item fails naming the file; "header": the run's header says it


def spec(shape=(2, 3), dtype="torch.float32", low=-1.0, high=1.0, **extra) -> dict:
    return {
        "type": "torch.Tensor",
        "dtype": dtype,
        "shape": list(shape),
        "Max": high,
        "Min": low,
        "Mean": 0.0,
        "Norm": 1.0,
        "requires_grad": False,
        **extra,
    }


def scalar(kind: str, value: Any) -> dict:
    return {"type": kind, "value": value}


def call(args: list[Any], kwargs: dict | None = None, outputs: list | None = None) -> dict:
    return {"input_args": args, "input_kwargs": kwargs or {}, "output": outputs if outputs is not None else [spec()]}


def shell(marks: Path, name: str) -> dict:
    return scalar("str", f"touch {marks / name}")


def api_cases(marks: Path) -> list[Case]:
    """Entry names that would reach code, files, memory or the interpreter if followed as attributes."""
    out = [spec()]
    return [
        Case(
            "a shell command through torch.os",
            "Torch.os.system.0.forward",
            call([shell(marks, "os_system")]),
            "Torch.os.system: not one of the APIs msprobe records",
        ),
        Case(
            "the same through torch.nn.functional.torch",
            "Functional.torch.os.system.0.forward",
            call([shell(marks, "functional_torch")]),
            "not one of the APIs msprobe records",
        ),
        Case(
            "subprocess through torch",
            "Torch.subprocess.run.0.forward",
            call([shell(marks, "subprocess")]),
            "not one of the APIs msprobe records",
        ),
        Case(
            "a pickle through torch.load",
            "Torch.load.0.forward",
            call([scalar("str", str(marks.parent / "evil.pickle"))], {"weights_only": scalar("bool", False)}),
            "Torch.load: not one of the APIs msprobe records",
        ),
        Case(
            "a file written by torch.save",
            "Torch.save.0.forward",
            call([spec(), scalar("str", str(marks / "saved.pt"))]),
            "Torch.save: not one of the APIs",
        ),
        Case(
            "memory read by ctypes",
            "Torch.ctypes.string_at.0.forward",
            call([scalar("int", 0)]),
            "not one of the APIs msprobe records",
        ),
        Case("the process aborted", "Torch.os.abort.0.forward", call([]), "not one of the APIs msprobe records"),
        Case(
            "a file mapped by from_file",
            "Torch.from_file.0.forward",
            call([scalar("str", "/etc/passwd"), scalar("bool", True), scalar("int", 10)]),
            "Torch.from_file: not one of the APIs",
        ),
        Case(
            "code fetched by torch.hub",
            "Torch.hub.load.0.forward",
            call([scalar("str", "attacker/repo"), scalar("str", "model")]),
            "not one of the APIs",
        ),
        Case(
            "a global default changed",
            "Torch.set_default_dtype.0.forward",
            call([scalar("torch.dtype", "torch.float64")]),
            "not one of the APIs",
        ),
        Case("the global seed changed", "Torch.manual_seed.0.forward", call([scalar("int", 0)]), "not one of the APIs"),
        Case(
            "a module attribute aten's own list names",
            "Aten.__loader__.0.forward",
            call([]),
            "'__loader__' is a module's attribute",
        ),
        Case("a module's spec through aten", "Aten.__spec__.0.forward", call([]), "never called"),
        Case(
            "an overload walk to the class",
            "Aten.add.__class__.0.forward",
            call([spec(), spec()]),
            "'__class__' is interpreter machinery",
        ),
        Case("an overload walk to globals", "Aten.add.__init__.0.forward", call([]), "interpreter machinery"),
        Case(
            "an index without bounds checks",
            "Aten._unsafe_index.0.forward",
            call([spec(), [spec(dtype="torch.int64")]]),
            "'_unsafe_index' reads or shares raw memory",
        ),
        Case("a raw pointer", "Tensor.data_ptr.0.forward", call([spec()]), "Tensor.data_ptr: not one of the APIs"),
        Case("a tensor's storage", "Tensor.untyped_storage.0.forward", call([spec()]), "reads or shares raw memory"),
        Case("a storage swapped in", "Tensor.set_.0.forward", call([spec(), spec()]), "Tensor.set_"),
        Case(
            "pickling machinery",
            "Tensor.__reduce_ex__.0.forward",
            call([spec(), scalar("int", 2)]),
            "Tensor.__reduce_ex__",
        ),
        Case(
            "unpickling machinery",
            "Tensor.__setstate__.0.forward",
            call([spec(), scalar("str", "x")]),
            "Tensor.__setstate__",
        ),
        Case(
            "attribute access itself",
            "Tensor.__getattribute__.0.forward",
            call([spec(), scalar("str", "x")]),
            "Tensor.__getattribute__",
        ),
        Case("uninitialised memory", "Torch.empty.0.forward", call([scalar("int", 4)]), "non-deterministic"),
        Case("a compiler", "Torch.compile.0.forward", call([spec()]), "Torch.compile: not one of the APIs"),
        Case("TorchScript", "Torch.jit.script.0.forward", call([spec()]), "Torch.jit.script: not one of the APIs"),
        Case(
            "a shell through the NPU type",
            "NPU.os.system.0.forward",
            call([shell(marks, "npu")]),
            "NPU.os.system: not one of the APIs",
        ),
        Case(
            "a data pointer changed on the NPU",
            "NPU.npu_change_data_ptr.0.forward",
            call([spec(), spec()]),
            "reads or shares raw memory",
        ),
        Case("a shell through _VF", "VF.os.system.0.forward", call([shell(marks, "vf")]), "VF.os.system"),
        Case(
            "a shell through a collective",
            "Distributed.os.system.0.forward",
            call([shell(marks, "dist")]),
            "collective",
        ),
        Case(
            "an entry type msprobe has not",
            "Os.system.0.forward",
            call([shell(marks, "type")]),
            "msprobe has no pytorch API type 'Os'",
        ),
        Case("the builtins of torch", "Torch.__builtins__.0.forward", call([]), "Torch.__builtins__"),
        Case(
            "the import statement",
            "Functional.__import__.0.forward",
            call([scalar("str", "os")]),
            "Functional.__import__",
        ),
        Case("a submodule itself", "Torch.linalg.0.forward", call([spec()]), "Torch.linalg"),
        Case(
            "a listed path with more after it",
            "Torch.linalg.norm.__globals__.0.forward",
            call([spec()]),
            "not one of the APIs",
        ),
        Case(
            "a dtype named by torch's attributes",
            "Functional.relu.900.forward",
            call([spec(dtype="torch.os")], outputs=out),
            "input_args[0].dtype: unknown dtype 'torch.os'",
        ),
        Case(
            "a class where a dtype goes",
            "Functional.relu.901.forward",
            call([spec(dtype="torch.Tensor")]),
            "input_args[0].dtype: unknown dtype 'torch.Tensor'",
        ),
        Case(
            "a function where a dtype goes",
            "Tensor.to.900.forward",
            call([scalar("torch.dtype", "torch.load")]),
            "input_args[0].value: cannot read 'torch.load'",
        ),
        Case(
            "an argument type that is a function",
            "Functional.relu.902.forward",
            call([scalar("function", "os.system")]),
            "input_args[0].type: unsupported argument type 'function'",
        ),
        Case(
            "a device argument naming a shell",
            "Tensor.to.901.forward",
            call([spec(), scalar("torch.device", "$(touch x)")]),
            "",
        ),
    ]


def name_cases() -> list[Case]:
    """Entry names that are no API name: each a SKIP whose row keeps the name, as text."""
    skip = "not an API entry name"
    return [
        Case("a path in the name", "Torch.a/../../b.0.forward", call([]), skip, row="Torch.a/../../b.0.forward"),
        Case(
            "pytest's separator in the name",
            "Functional.relu::x.0.forward",
            call([]),
            skip,
            row="Functional.relu::x.0.forward",
        ),
        Case("an empty part", "Torch..relu.0.forward", call([]), skip, row="Torch..relu.0.forward"),
        Case(
            "terminal escapes in the name",
            "Functional.relu\x1b[2J\x1b]0;pwned\x07.0.forward",
            call([]),
            skip,
            row="Functional.relu\x1b[2J\x1b]0;pwned\x07.0.forward",
        ),
        Case("a NUL in the name", "Functional.relu\x00.0.forward", call([]), skip, row="Functional.relu\x00.0.forward"),
        Case("a newline then a formula", "\n=1+2.0.forward", call([]), skip, row="\n=1+2.0.forward"),
        Case("a formula", '=HYPERLINK("http://attacker/")', call([]), skip, row='=HYPERLINK("http://attacker/")'),
        Case("a quoted formula", "'=cmd|' /C calc'!A0", call([]), skip, row="'=cmd|' /C calc'!A0"),
        Case("a tab then a formula", "\t=1+1", call([]), skip, row="\t=1+1"),
        Case(
            "a right-to-left override",
            "Functional.relu\u202e.0.forward",
            call([]),
            skip,
            row="Functional.relu\u202e.0.forward",
        ),
        Case(
            "a lone surrogate", "Functional.relu\ud800.0.forward", call([]), skip, row="Functional.relu\ud800.0.forward"
        ),
        Case("a fullwidth formula", "\uff1dSUM(A1)", call([]), skip, row="\uff1dSUM(A1)"),
        Case(
            "a name of 200,000 characters",
            "Torch." + "a" * 200_000 + ".0.forward",
            call([]),
            skip,
            row="Torch." + "a" * 200_000 + ".0.forward",
        ),
        Case(
            "a digit that is no ASCII digit",
            "Functional.relu.\u0663.forward",
            call([]),
            skip,
            row="Functional.relu.\u0663.forward",
        ),
        Case(
            "a direction with a space", "Functional.relu.0.forward ", call([]), skip, row="Functional.relu.0.forward "
        ),
        Case("a backslash", "Functional.re\\lu.0.forward", call([]), skip, row="Functional.re\\lu.0.forward"),
    ]


def input_cases() -> list[Case]:
    """Bodies of real APIs whose arguments cannot be rebuilt (random data from statistics)."""
    relu = "Functional.relu"
    deep = [spec()]
    for _ in range(150):
        deep = [deep]
    return [
        Case(
            "7 PiB asked",
            f"{relu}.910.forward",
            call([spec(shape=[2**53])]),
            "input_args[0].shape: [9007199254740992] is 9,007,199,254,740,992 elements",
        ),
        Case(
            "many tensors past the bound together",
            "Torch.cat.910.forward",
            call([[spec(shape=[1000, 100]) for _ in range(11)]]),
            "more than --msprobe-max-elements 1,000,000",
        ),
        Case(
            "more dimensions than any tensor",
            f"{relu}.911.forward",
            call([spec(shape=[1] * 100)]),
            "input_args[0].shape: 100 dimensions",
        ),
        Case("a negative size", f"{relu}.912.forward", call([spec(shape=[2, -3])]), "input_args[0].shape: not a list"),
        Case("a size that is a bool", f"{relu}.913.forward", call([spec(shape=[True, 2])]), "input_args[0].shape"),
        Case("a shape that is a string", f"{relu}.914.forward", call([spec(shape="[2, 3]")]), "input_args[0].shape"),
        Case(
            "float16 Max 1e308",
            f"{relu}.915.forward",
            call([spec(dtype="torch.float16", high=1e308)]),
            "input_args[0].Max: 1e+308 is beyond the largest float16",
        ),
        Case(
            "float16 Min -1e308",
            f"{relu}.916.forward",
            call([spec(dtype="torch.float16", low=-1e308)]),
            "input_args[0].Min: -1e+308 is beyond the largest float16",
        ),
        Case(
            "int64 Max 1e300",
            "Tensor.add.910.forward",
            call([spec(dtype="torch.int64", low=0, high=1e300), scalar("int", 1)]),
            "input_args[0].Max: 1e+300 is outside the range of int64",
        ),
        Case(
            "int32 Max past int32",
            "Tensor.add.911.forward",
            call([spec(dtype="torch.int32", low=0, high=3e9), scalar("int", 1)]),
            "outside the range of int32",
        ),
        Case(
            "a Max that is an object",
            f"{relu}.917.forward",
            call([spec(high={"__class__": "os"})]),
            "input_args[0].Max: not a number",
        ),
        Case("lists nested 150 deep", "Torch.cat.911.forward", call(deep), "nested deeper than 100 levels"),
        Case("an entry that is no object", f"{relu}.918.forward", "os.system", "the entry is not an object"),
        Case(
            "input_args that is no list",
            f"{relu}.919.forward",
            {"input_args": {"0": spec()}},
            "input_args: expected a list",
        ),
        Case(
            "input_kwargs that is no object",
            f"{relu}.920.forward",
            {"input_args": [spec()], "input_kwargs": [1]},
            "input_kwargs: expected an object",
        ),
        Case(
            "a slice of five",
            "Tensor.__getitem__.910.forward",
            call([spec(), scalar("slice", [1, 2, 3, 4, 5])]),
            "input_args[1].value: cannot read",
        ),
        Case("a scalar with no value", f"{relu}.921.forward", call([{"type": "int"}]), "input_args[0].value: missing"),
        Case(
            "a backward without its forward",
            f"{relu}.922.backward",
            {"input": [spec()], "output": [spec()]},
            "no forward entry Functional.relu.922.forward",
        ),
        Case(
            "a NUL in data_name (statistics)",
            f"{relu}.923.forward",
            call([spec(data_name="x\x00.pt")]),
            "input_args[0].data_name: not a file name",
        ),
        Case(
            "a lone surrogate in a str argument",
            "Tensor.to.910.forward",
            call([spec(), scalar("str", "\ud800")]),
            "input_args[1].value: cannot read",
        ),
    ]


def parse_cases() -> dict[str, str]:
    """Bodies a JSON library writes no way to: {entry: raw body}, and what the row says."""
    deep = "[" * 10_000 + "]" * 10_000
    return {
        "Functional.relu.930.forward": (
            RawJson(f'{{"input_args": {deep}, "input_kwargs": {{}}, "output": []}}'),
            "input_args: nested deeper than 500 levels",
        ),
        "Functional.gelu.930.forward": (
            RawJson('{"input_args": [], "output": []}'),
            "written more than once in dump.json",
        ),
    }


def file_cases(marks: Path) -> list[Case]:
    """Tensor files of a tensor dump: where they point, what they hold (real data, recorded outputs)."""
    relu = "Functional.relu"
    return [
        Case(
            "a NUL in data_name",
            f"{relu}.940.forward",
            call([spec(data_name="x\x00.pt")]),
            "input_args[0].data_name: not a file name",
        ),
        Case(
            "data_name climbing out",
            f"{relu}.941.forward",
            call([spec(data_name="../../../../etc/passwd")]),
            "points outside",
        ),
        Case("an absolute data_name", f"{relu}.942.forward", call([spec(data_name="/etc/passwd")]), "points outside"),
        Case(
            "a data_name that is a list",
            f"{relu}.943.forward",
            call([spec(data_name=["a.pt"])]),
            "input_args[0].data_name: not a file name",
        ),
        Case("a FIFO where a tensor file goes", f"{relu}.944.forward", call([spec(data_name="fifo.pt")]), "fifo.pt"),
        Case("a symlink out of the dump", f"{relu}.945.forward", call([spec(data_name="passwd.pt")]), "points outside"),
        Case(
            "a pickle that runs code",
            f"{relu}.946.forward",
            call([spec(data_name="evil.pt")]),
            "input_args[0].data_name: cannot load evil.pt",
        ),
        Case(
            "a zip .pt whose pickle runs code",
            f"{relu}.947.forward",
            call([spec(data_name="evil_zip.pt")]),
            "input_args[0].data_name: cannot load evil_zip.pt",
        ),
        Case(
            "a file that is no tensor file",
            f"{relu}.948.forward",
            call([spec(data_name="garbage.pt")]),
            "cannot load garbage.pt",
        ),
        Case(
            "a .pt of another dtype",
            f"{relu}.949.forward",
            call(
                [spec(shape=[2, 3], dtype="torch.float32", data_name="float64.pt")],
                outputs=[spec(shape=[2, 3], data_name="float64.pt")],
            ),
            "float64.pt holds torch.float64, dump.json records torch.float32: cast to the recorded dtype",
        ),
        Case(
            "a .pt of another shape",
            f"{relu}.950.forward",
            call([spec(shape=[5], data_name="float64.pt")]),
            "input_args[0].shape: recorded [5] but float64.pt holds [2, 3]",
        ),
        Case(
            "a .pt holding no tensor", f"{relu}.951.forward", call([spec(data_name="dict.pt")]), "cannot load dict.pt"
        ),
    ]


def index_cases(real: bool) -> list[Case]:
    """Index arguments outside what they index (issue 26): kernels that trust them write or read out
    of bounds, or crash the process. Random data (statistics) or, with `real`, tensor files
    (written by write_index_files); each refused naming the field and the bound, before any call."""

    def ints(*values: int) -> list[dict]:
        return [scalar("int", v) for v in values]

    def index(shape: list[int], low: int, high: int, name: str) -> dict:
        return tensor(shape, name, "torch.int64", low, high)

    def tensor(shape: list[int], name: str, dtype: str = "torch.float32", low: float = -1.0, high: float = 1.0) -> dict:
        # Real data (and recorded outputs) load every input from its file: write_index_files writes them.
        return spec(shape, dtype, low, high, **({"data_name": name} if real else {}))

    n = 960 if real else 900
    pool = [
        tensor([1, 1, 2, 2], "grad_2x2.pt"),
        tensor([1, 1, 4, 4], "input_4x4.pt"),
        ints(2, 2),
        ints(2, 2),
        ints(0, 0),
        ints(1, 1),
        scalar("bool", False),
        index([1, 1, 2, 2], 10**12, 10**12, "pool_indices.pt"),
    ]
    return [
        Case(
            "max pooling's backward told to write 10^12 past a 4x4 input",
            f"Aten.max_pool2d_with_indices_backward.{n}.forward",
            call(pool, outputs=[spec([1, 1, 4, 4])]),
            "input_args[7]: indices in [1000000000000, 1000000000000], outside [0, 15], the 4x4 plane of self",
        ),
        Case(
            "adaptive max pooling's backward, 3-D, an index of -5000",
            f"Aten.adaptive_max_pool3d_backward.{n}.forward",
            call(
                [
                    tensor([1, 1, 1, 2, 2], "grad_3d.pt"),
                    tensor([1, 1, 2, 4, 4], "input_3d.pt"),
                    index([1, 1, 1, 2, 2], -5000, -5000, "pool3d.pt"),
                ],
                outputs=[spec([1, 1, 2, 4, 4])],
            ),
            "the 2x4x4 plane of self",
        ),
        Case(
            "ctc_loss with a target class past the log-probs",
            f"Functional.ctc_loss.{n}.forward",
            call(
                [
                    tensor([10, 2, 5], "log_probs.pt", low=-3.0, high=-0.5),
                    index([2, 2], 10**12, 10**12, "targets.pt"),
                    tensor([2], "input_lengths.pt", "torch.int64", 10, 10),
                    tensor([2], "target_lengths.pt", "torch.int64", 2, 2),
                ],
                outputs=[spec([])],
            ),
            "input_args[1]: indices in [1000000000000, 1000000000000], outside [0, 4], the 5 classes of log_probs",
        ),
        Case(
            "embedding_bag with offsets past its indices",
            f"Torch.embedding_bag.{n}.forward",
            call(
                [
                    tensor([5, 3], "weight.pt"),
                    tensor([4], "bag.pt", "torch.int64", 0, 4),
                    index([2], 10**12, 10**12, "offsets.pt"),
                ],
                outputs=[spec([2, 3]), spec([0], "torch.int64"), spec([2], "torch.int64"), spec([2], "torch.int64")],
            ),
            "input_args[2]: indices in [1000000000000, 1000000000000], outside [0, 4], the length 4 of indices",
        ),
        Case(
            "embedding rows before the first",
            f"Functional.embedding.{n}.forward",
            call([index([3], -7, -7, "rows.pt"), tensor([5, 3], "weight.pt")], outputs=[spec([3, 3])]),
            "input_args[0]: indices in [-7, -7], outside [0, 4], the 5 rows of weight: a real run's indices",
        ),
        Case(
            "a view over raw sizes and strides past its storage",
            f"Aten._reshape_alias.{n}.forward",
            call([tensor([4], "four.pt"), ints(4096), ints(1)], outputs=[spec([4096])]),
            "'_reshape_alias' is an unchecked kernel",
        ),
    ]


def write_index_files(folder: Path) -> None:
    """The hostile index tensors of index_cases(real=True), as a tensor dump holds them."""
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(torch.full((1, 1, 2, 2), 10**12), folder / "pool_indices.pt")
    torch.save(torch.full((1, 1, 1, 2, 2), -5000), folder / "pool3d.pt")
    torch.save(torch.full((2, 2), 10**12), folder / "targets.pt")
    torch.save(torch.full((2,), 10**12), folder / "offsets.pt")
    torch.save(torch.full((3,), -7), folder / "rows.pt")
    for name, shape in (
        ("grad_2x2.pt", (1, 1, 2, 2)),
        ("input_4x4.pt", (1, 1, 4, 4)),
        ("grad_3d.pt", (1, 1, 1, 2, 2)),
        ("input_3d.pt", (1, 1, 2, 4, 4)),
        ("weight.pt", (5, 3)),
        ("four.pt", (4,)),
    ):
        torch.save(torch.rand(shape), folder / name)
    torch.save(torch.rand(10, 2, 5).log_softmax(2), folder / "log_probs.pt")
    torch.save(torch.full((2,), 10), folder / "input_lengths.pt")
    torch.save(torch.full((2,), 2), folder / "target_lengths.pt")
    torch.save(torch.tensor([0, 1, 2, 4]), folder / "bag.pt")


class Evil:
    """Unpickled, it writes a mark: what a .pt made with pickle can do to torch.load(weights_only=False)."""

    def __init__(self, mark: Path):
        self.mark = str(mark)

    def __reduce__(self):
        return (os.system, (f"touch {self.mark}",))


def write_tensor_files(folder: Path, marks: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "evil.pt").write_bytes(pickle.dumps(Evil(marks / "pickle_pt")))
    torch.save({"x": Evil(marks / "pickle_zip")}, folder / "evil_zip.pt")
    (folder / "garbage.pt").write_bytes(b"\x80\x04not a tensor at all")
    torch.save(torch.arange(6, dtype=torch.float64).reshape(2, 3), folder / "float64.pt")
    torch.save({"a": torch.zeros(2)}, folder / "dict.pt")
    os.mkfifo(folder / "fifo.pt")
    (folder / "passwd.pt").symlink_to("/etc/passwd")


def ms_cases(marks: Path) -> list[Case]:
    """MindSpore entry types: the same tricks, MindSpore's lists."""
    x = {
        "type": "mindspore.Tensor",
        "dtype": "Float32",
        "shape": [2, 3],
        "Max": 1.0,
        "Min": -1.0,
        "Mean": 0.0,
        "Norm": 1.0,
    }
    cmd = scalar("str", f"touch {marks / 'ms'}")
    body = call([cmd], outputs=[x])
    return [
        Case("a shell through mint", "Mint.os.system.0.forward", body, "Mint.os.system: not one of the APIs"),
        Case(
            "a shell through mint.nn.functional",
            "MintFunctional.torch.os.system.0.forward",
            body,
            "not one of the APIs msprobe records",
        ),
        Case("a submodule mint's list names", "Mint.nn.0.forward", call([x], outputs=[x]), "is a module"),
        Case(
            "a module attribute mint's list names",
            "Mint.absolute_import.0.forward",
            call([x], outputs=[x]),
            "is a module's attribute",
        ),
        Case("the class of a tensor", "Tensor.__class__.0.forward", call([x], outputs=[x]), "Tensor.__class__"),
        Case(
            "a primitive that runs Python",
            "Primitive.custom.Custom.0.forward",
            call([x], outputs=[x]),
            "Primitive.custom.Custom has no PyTorch equivalent",
        ),
        Case(
            "a primitive that writes files",
            "Primitive.dump.TensorDump.0.forward",
            call([scalar("str", str(marks / "tensordump")), x], outputs=[]),
            "has no PyTorch equivalent",
        ),
        Case(
            "a path in a primitive's name",
            "Primitive.a/../b.Dense.0.forward",
            call([x, x], outputs=[x]),
            "not an API entry name",
            row="Primitive.a/../b.Dense.0.forward",
        ),
        Case("a shell through ops", "Functional.os.system.0.forward", body, "Functional.os.system"),
        Case(
            "a dtype that is no MindSpore dtype",
            "Mint.abs.900.forward",
            call([{**x, "dtype": "os"}], outputs=[x]),
            "input_args[0].dtype: unknown dtype 'os'",
        ),
    ]


def whole_file_cases(root: Path, marks: Path) -> list[FileCase]:
    """One folder each, under root."""
    stats = json.loads((DUMPS["pt_stats_L1"] / "dump.json").read_text())

    def write(folder: str, text) -> None:
        (root / folder).mkdir(parents=True)
        path = root / folder / "dump.json"
        path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))

    write("file_framework_object", json.dumps({**stats, "framework": {"__class__": "os"}}))
    write("file_task_list", json.dumps({**stats, "task": ["tensor"]}))
    write("file_framework_unknown", json.dumps({**stats, "framework": "evil"}))
    write("file_not_json", '{"task": "statistics", "data": {"Torch.os.system.0.forward": ')
    write("file_empty", b"")
    write("file_list", "[1, 2, 3]")
    write("file_data_list", json.dumps({"task": "statistics", "data": [1, 2]}))
    write("file_bad_utf8", b'{"task": "statistics", "data": {"\xff\xfe": {}}}')
    write("file_deep_header", '{"task": "statistics", "x": ' + "[" * 10_000 + "]" * 10_000 + ', "data": {}}')
    (root / "file_fifo").mkdir()
    os.mkfifo(root / "file_fifo" / "dump.json")
    # A dump whose tensor folder is a link out of its folder: followed, it reads any file by its name.
    shutil.copytree(DUMPS["pt_tensor_L1"], root / "file_tensor_link", ignore=shutil.ignore_patterns("dump_tensor_data"))
    shutil.copytree(DUMPS["pt_tensor_L1"] / "dump_tensor_data", root.parent / "elsewhere")
    (root / "file_tensor_link" / "dump_tensor_data").symlink_to(root.parent / "elsewhere")
    (root / "file_device").mkdir()
    (root / "file_device" / "dump.json").symlink_to("/dev/zero")
    # A folder named dump.json holding a test module: pytest would collect and run it if it were given.
    evil = root / "file_folder" / "dump.json"
    evil.mkdir(parents=True)
    (evil / "test_evil.py").write_text(f"open({str(marks / 'collected')!r}, 'w')\n")
    return [
        FileCase("a framework that is an object", "file_framework_object", "framework: expected a string"),
        FileCase("a task that is a list", "file_task_list", "task: expected a string"),
        FileCase(
            "a framework pytest-msprobe has no module for",
            "file_framework_unknown",
            "dumps of framework 'evil' are not supported",
        ),
        FileCase("a file cut short", "file_not_json", "not valid JSON"),
        FileCase("an empty file", "file_empty", "not valid JSON"),
        FileCase("a list at the top", "file_list", "not an msprobe dump"),
        FileCase("data that is a list", "file_data_list", "not an msprobe dump"),
        # Read as lone surrogates (`\\udcff`), as a JSON `\\ud800` is: only its entry is odd, named.
        FileCase("bytes that are no UTF-8", "file_bad_utf8", "not an API entry name"),
        FileCase("nesting outside the entries", "file_deep_header", "outside the entries of `data`"),
        FileCase("a tensor folder that links out of the dump's", "file_tensor_link", "outside the dump's folder"),
        FileCase("a FIFO named dump.json", "file_fifo", "not a regular file", where="header"),
        FileCase("a link to a device named dump.json", "file_device", "not a regular file", where="header"),
        FileCase("a folder named dump.json", "file_folder", "not a regular file", where="header"),
    ]


@dataclass(frozen=True)
class CodeLayout:
    """A dump unpacked with Python files in or above its folders: pytest must import none of them
    to collect it, wherever it is run from (it may refuse to start where it would itself import a
    conftest.py at startup). Each file writes a marker `<layout>.<path>` in marks when imported."""

    what: str
    dump: str  # its dump.json, relative to the layout's folder
    code: tuple[str, ...]  # the Python files, relative to it
    # Run from the dump's folder, the conftest.py pytest would import at startup (refused): where
    # the rootdir is above the layout, or another folder (pytest imports those of the folders
    # above); where confcutdir is that folder, as with no ini file above (none above; "": it runs).
    refused_from_its_folder: str
    refused_alone: str


CODE_LAYOUTS = {
    "beside": CodeLayout(
        "conftest.py, __init__.py and a test module beside dump.json",
        "dump.json",
        ("conftest.py", "__init__.py", "test_beside.py"),
        refused_from_its_folder="conftest.py",
        refused_alone="conftest.py",
    ),
    "one_up": CodeLayout(
        "conftest.py and a package one level above dump.json",
        "a/dump.json",
        ("conftest.py", "__init__.py", "a/__init__.py", "test_up.py"),
        refused_from_its_folder="conftest.py",
        refused_alone="",
    ),
    "two_up": CodeLayout(
        "conftest.py and packages two levels above dump.json",
        "a/b/dump.json",
        ("conftest.py", "__init__.py", "a/__init__.py", "a/b/__init__.py", "a/conftest.py"),
        refused_from_its_folder="a/conftest.py",
        refused_alone="",
    ),
    "msprobe": CodeLayout(
        "msprobe's dump_path/step0/rank0/ with conftest.py at its root and in step0",
        "dump_path/step0/rank0/dump.json",
        ("dump_path/conftest.py", "dump_path/step0/conftest.py", "dump_path/step0/__init__.py", "__init__.py"),
        refused_from_its_folder="dump_path/step0/conftest.py",
        refused_alone="",
    ),
    "test_folders": CodeLayout(
        "test* folders beside dump.json (pytest imports their conftest.py when run from there)",
        "rank3/dump.json",
        ("rank3/tests/conftest.py", "rank3/testing/conftest.py", "rank3/test_data/__init__.py"),
        refused_from_its_folder="rank3/testing/conftest.py",
        refused_alone="rank3/testing/conftest.py",
    ),
}
# A small dump: three entries of pt_stats_L1, a row each for two APIs.
LAYOUT_ENTRIES = ("Functional.relu.0.forward", "Functional.relu.0.backward", "Tensor.add.0.forward")


def code_layouts(root: Path, marks: Path) -> dict[str, CodeLayout]:
    """Each layout in root/<its key>, its Python files writing their markers in marks."""
    document = json.loads((DUMPS["pt_stats_L1"] / "dump.json").read_text())
    document["data"] = {name: document["data"][name] for name in LAYOUT_ENTRIES}
    for key, layout in CODE_LAYOUTS.items():
        dump = root / key / layout.dump
        dump.parent.mkdir(parents=True)
        dump.write_text(json.dumps(document))
        for name in layout.code:
            path = root / key / name
            path.parent.mkdir(parents=True, exist_ok=True)
            mark = marks / f"{key}.{name.replace('/', '.')}"
            path.write_text(f"open({str(mark)!r}, 'w').close()\n")
    return CODE_LAYOUTS


@dataclass
class Corpus:
    root: Path
    marks: Path
    cases: dict[str, list[Case]]  # by dump folder
    files: list[FileCase]

    def count(self) -> int:
        return sum(len(cases) for cases in self.cases.values()) + len(self.files)


HOSTILE_TEXT = "\ud800\x00\x1b[2J\u202e\udcff"  # no UTF-8 holds it, a terminal obeys it


def text_cases() -> list[Case]:
    """Text no file or terminal takes raw (a lone surrogate, a NUL, an escape sequence) in the
    fields of an argument: each a SKIP naming its field, its row and the terminal escaped (issue 26.6)."""
    relu, t = "Functional.relu", HOSTILE_TEXT
    return [
        Case(
            "a keyword name",
            f"{relu}.960.forward",
            call([spec()], {t: scalar("bool", False)}),
            "input_kwargs: '\\ud800",
        ),
        Case("a dtype", f"{relu}.961.forward", call([spec(dtype=t)]), "input_args[0].dtype: unknown dtype '\\ud800"),
        Case(
            "a shape as a string",
            f"{relu}.962.forward",
            call([{**spec(), "shape": t}]),
            "input_args[0].shape: not a list",
        ),
        Case("a type", f"{relu}.963.forward", call([{**spec(), "type": t}]), "input_args[0].type: unsupported"),
        Case(
            "a str argument",
            f"{relu}.964.forward",
            call([spec()], {"inplace": scalar("str", t)}),
            "input_kwargs.inplace",
        ),
        Case(
            "a data_name", f"{relu}.965.forward", call([spec(data_name=t)]), "input_args[0].data_name: not a file name"
        ),
    ]


def type_cases() -> list[Case]:
    """Fields of the wrong kind (issue 26.9): a SKIP naming the field, its item skipped alike."""
    leaky = "Functional.leaky_relu"
    return [
        Case(
            "a type that is a list",
            f"{leaky}.970.forward",
            call([spec(), {"type": [], "value": 0.1}]),
            "input_args[1].type",
        ),
        Case(
            "a type that is an object",
            f"{leaky}.971.forward",
            call([spec(), {"type": {}, "value": 0.1}]),
            "input_args[1].type",
        ),
        Case(
            "a float of 400 digits",
            f"{leaky}.972.forward",
            call([spec(), scalar("float", 10**400)]),
            "input_args[1].value",
        ),
        Case(
            "a dtype that is a list",
            f"{leaky}.973.forward",
            call([spec(dtype=["torch.float32"])]),
            "input_args[0].dtype: not",
        ),
        Case(
            "a shape that is an object",
            f"{leaky}.974.forward",
            call([{**spec(), "shape": {"0": 2}}]),
            "input_args[0].shape: not",
        ),
        Case(
            "a Max that is a list", f"{leaky}.975.forward", call([spec(high=[1.0])]), "input_args[0].Max: not a number"
        ),
        Case(
            "an output dtype that is a list",
            f"{leaky}.976.forward",
            call([spec()], outputs=[spec(dtype=[])]),
            "output[0].dtype",
        ),
        Case(
            "requires_grad a string",
            f"{leaky}.977.forward",
            call([{**spec(), "requires_grad": "yes"}]),
            "requires_grad",
        ),
    ]


def write_dump(folder: Path, base: str, cases: list[Case], raw: dict[str, Any] = {}) -> None:  # noqa: B006
    """The base dump's header and entries, then the cases' entries, in one data object."""
    shutil.copytree(DUMPS[base], folder)
    document = json.loads((folder / "dump.json").read_text())
    header = {key: value for key, value in document.items() if key != "data"}
    members = [f"{json.dumps(name)}: {json.dumps(body)}" for name, body in document["data"].items()]
    for case in cases:
        body = case.body.text if isinstance(case.body, RawJson) else json.dumps(case.body)
        members.append(f"{json.dumps(case.entry)}: {body}")
    text = json.dumps(header)[:-1] + ', "data": {' + ", ".join(members) + "}}"
    (folder / "dump.json").write_bytes(text.encode("utf-8", "surrogatepass"))


def size_cases() -> list[Case]:
    """Outputs asked by arguments far past the bound (issue 26.4), inputs within it: each a SKIP naming
    the output, its shape and the bound, found before anything is allocated (random data)."""

    def ints(*values: int) -> list[dict]:
        return [scalar("int", v) for v in values]

    bound = f"more than --msprobe-max-elements {MAX_ELEMENTS:,}: not run"
    return [
        Case("eye of 30000", "Torch.eye.980.forward", call(ints(30000)), "output[0] would be [30000, 30000]"),
        Case(
            "arange to 2e9",
            "Torch.arange.980.forward",
            call([*ints(0), scalar("float", 2e9)]),
            "output[0] would be [2000000000] is 2,000,000,000 elements",
        ),
        Case(
            "tile to a square of 50000",
            "Tensor.tile.980.forward",
            call([spec([1, 1]), ints(50000, 50000)]),
            "output[0] would be [50000, 50000]",
        ),
        Case(
            "a broadcast of two vectors",
            "Tensor.mul.980.forward",
            call([spec([40000, 1]), spec([1, 40000])]),
            "output[0] would be [40000, 40000]",
        ),
        Case(
            "linspace of 1e10 steps",
            "Torch.linspace.980.forward",
            call([scalar("float", 0.0), scalar("float", 1.0), *ints(10**10)]),
            f"output[0] would be [10000000000] is 10,000,000,000 elements (sized by its arguments), {bound}",
        ),
        Case(
            "upsample by a factor of 3000",
            "Functional.interpolate.980.forward",
            call([spec([1, 1, 2, 2])], {"scale_factor": scalar("float", 3000.0)}),
            "output[0] would be [1, 1, 6000, 6000]",
        ),
        Case(
            "repeats in the data",
            "Tensor.repeat_interleave.980.forward",
            call([spec([3]), spec([3], "torch.int64", 10**9, 10**9)]),
            "sized by its data is 3,000,000,000 elements",
        ),
        Case(
            "a recorded output of 1e12",
            "Functional.gelu.980.forward",
            call([spec()], outputs=[spec([10**6, 10**6])]),
            "output[0].shape: recorded [1000000, 1000000] is 1,000,000,000,000 elements",
        ),
    ]


def inflating_cases() -> list[Case]:
    """Tensor files declaring more than they hold, or past the bound (issue 26.5): refused before a
    loader allocates what they declare (written by write_inflating_files)."""
    relu = "Functional.relu"
    return [
        Case(
            "a deflated .pt declaring 2e6 float32",
            f"{relu}.980.forward",
            call([spec([2_000_000], data_name="inflating.pt")]),
            "input_args[0].data_name: inflating.pt declares 2,000,000 elements (2,000,000 float32), more than",
        ),
        Case(
            "a .pt declaring 1.5e9 elements and holding 24 bytes",
            f"{relu}.981.forward",
            call([spec([2, 3], data_name="lying.pt")]),
            "input_args[0].data_name: lying.pt declares 1,500,000,000 elements",
        ),
        Case(
            "a .npy header of 1.6e9 elements",
            f"{relu}.982.forward",
            call([spec([40000, 40000], data_name="header.npy")]),
            "input_args[0].data_name: header.npy declares 1,600,000,000 elements (float32), more than",
        ),
    ]


def write_inflating_files(folder: Path) -> None:
    """torch.save's archive of a small tensor with its pickle's sizes rewritten (LONG1 of 8 bytes) and
    its record deflated, or left as it was; a .npy whose header alone declares the size."""
    import io
    import struct
    import zipfile

    import numpy as np

    def pt(name: str, elements: int, full: bool) -> None:
        buffer = io.BytesIO()
        torch.save(torch.arange(6, dtype=torch.float32), buffer)
        source = zipfile.ZipFile(io.BytesIO(buffer.getvalue()))
        size = b"\x8a\x08" + struct.pack("<q", elements)
        with zipfile.ZipFile(folder / name, "w") as out:
            for info in source.infolist():
                data = source.read(info)
                if info.filename.endswith("/data.pkl"):
                    data = data.replace(b"cpuq\x04K\x06t", b"cpuq\x04" + size + b"t")
                    data = data.replace(b"K\x06\x85", size + b"\x85")
                if info.filename.endswith("/data/0") and full:
                    data = bytes(4 * elements)
                out.writestr(info.filename, data, compress_type=zipfile.ZIP_DEFLATED)

    folder.mkdir(parents=True, exist_ok=True)
    pt("inflating.pt", 2_000_000, True)
    pt("lying.pt", 1_500_000_000, False)
    with open(folder / "header.npy", "wb") as handle:
        np.lib.format.write_array_header_1_0(handle, {"descr": "<f4", "fortran_order": False, "shape": (40000, 40000)})
        handle.write(bytes(64))


def build(root: Path, marks: Path) -> Corpus:
    marks.mkdir(parents=True, exist_ok=True)
    (root.parent / "evil.pickle").write_bytes(pickle.dumps(Evil(marks / "pickle_load")))
    parsed = [Case("parse: " + body.text[:20], name, body, says) for name, (body, says) in parse_cases().items()]
    # The duplicate: written once more before the raw one, so the file holds it twice.
    twice = Case(
        "an entry written twice", "Functional.gelu.930.forward", call([spec()]), "written more than once in dump.json"
    )
    cases = {
        "stats": api_cases(marks)
        + name_cases()
        + input_cases()
        + [twice]
        + parsed
        + index_cases(real=False)
        + text_cases()
        + type_cases()
        + size_cases(),
        "tensor": api_cases(marks) + name_cases() + file_cases(marks) + index_cases(real=True) + inflating_cases(),
        "ms": ms_cases(marks),
    }
    write_dump(root / "stats", "pt_stats_L1", cases["stats"])
    write_dump(root / "tensor", "pt_tensor_L1", cases["tensor"])
    write_tensor_files(root / "tensor" / "dump_tensor_data", marks)
    write_index_files(root / "tensor" / "dump_tensor_data")
    write_inflating_files(root / "tensor" / "dump_tensor_data")
    write_dump(root / "ms", "ms_stats_L1", cases["ms"])
    code_layouts(root / "layouts", marks)  # Python files in and above dumps' folders: none imported
    for base, folder in (("pt_stats_L1", "clean_stats"), ("pt_tensor_L1", "clean_tensor"), ("ms_stats_L1", "clean_ms")):
        shutil.copytree(DUMPS[base], root / folder)
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            path.chmod(0o644)
    cases["stats"] = [case for case in cases["stats"] if case is not twice]  # one row for both
    return Corpus(root, marks, cases, whole_file_cases(root, marks))
