"""The CSV layouts a run writes and reads back, as data: which columns, in which order, by name.

Two layouts:

- `DEFAULT`, shared/spec/reports.md's: the 9 details columns of msprobe's MindSpore pre-check,
  written for every dump unless asked otherwise (MindSpore dumps always);
- `MSPROBE_PYTORCH`, msprobe 26.2's PyTorch `acc_check` (shared/spec/msprobe-26-interop.md,
  section 1): 23 details columns, a blank cell as a single space, the result header `API name`.

A reader tells them apart by the header row (`of_result_header`, `of_details_header`), so resume,
merge, the HTML report and the comparison of two runs read either; a writer is chosen by the
run's option. Rows stay data (results.py) until a writer lays them out. No pytest, no framework.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    name: str  # the option's word
    result_columns: tuple[str, ...]
    details_columns: tuple[str, ...]
    blank: str  # a cell without a value: "" here; " " in msprobe's PyTorch files (pandas reads "" as NaN)

    def column(self, header: str) -> int:
        """The place of a details column, by its name."""
        return self.details_columns.index(header)


DEFAULT = Layout(
    "default",
    ("API Name", "Forward Test Success", "Backward Test Success", "Message"),
    ("API Name", "Bench Dtype", "Tested Dtype", "Shape", "Cosine", "MaxAbsErr", "MaxRelativeErr", "Status", "Message"),
    "",
)

# compare_utils.py's DETAIL_TEST_ROWS and RESULT_CSV_HEADER in msprobe 26.2.0, as it spells them.
MSPROBE_PYTORCH = Layout(
    "msprobe-pytorch",
    ("API name", "Forward Test Success", "Backward Test Success", "Message"),
    (
        "API Name",
        "Bench Dtype",
        "DEVICE Dtype",
        "Shape",
        "余弦相似度",
        "最大绝对误差",
        "双百指标",
        "双千指标",
        "双万指标",
        "二进制一致错误率",
        "误差均衡性",
        "均方根误差",
        "小值域错误占比",
        "相对误差最大值",
        "相对误差平均值",
        "inf/nan错误率",
        "相对误差错误率",
        "绝对误差错误率",
        "ULP误差最大值",
        "ULP误差平均值",
        "ULP误差大于阈值占比",
        "Status",
        "Message",
    ),
    " ",
)

LAYOUTS = (DEFAULT, MSPROBE_PYTORCH)
BY_NAME = {layout.name: layout for layout in LAYOUTS}


def of_result_header(header: Sequence[str]) -> Layout | None:
    """The layout whose result CSV starts with this header row, or None."""
    return next((layout for layout in LAYOUTS if tuple(header) == layout.result_columns), None)


def of_details_header(header: Sequence[str]) -> Layout | None:
    """The layout whose details CSV starts with this header row, or None."""
    return next((layout for layout in LAYOUTS if tuple(header) == layout.details_columns), None)


# msprobe's PyTorch acc_check reads these dumps; its MindSpore one writes the default layout's columns.
PYTORCH_FRAMEWORKS = frozenset({"pytorch", "mindtorch"})


def for_dump(asked: str, framework: str) -> Layout:
    """The layout a dump's CSV pair is written in: the one asked (--msprobe-csv-layout), but a
    MindSpore dump's is always the default (the 9 columns msprobe's MindSpore side writes)."""
    layout = BY_NAME[asked]
    return layout if layout is DEFAULT or framework in PYTORCH_FRAMEWORKS else DEFAULT
