"""Calls of an API equal but for the Max and Min of their tensors: msprobe's `acc_check -f`. No pytest.

msprobe 26.2.0 (acc_check.py, preprocess_forward_content) keeps, of the forward calls of one API
(`Functional.softmax`), the first of each set whose `input_args` and `input_kwargs` are equal once
Max and Min are taken out; the others are not checked, forward or backward. A statistics dump records
Max, Min, Mean and Norm: Mean and Norm (and shape, dtype, requires_grad) still tell two calls apart,
so a group holds calls on the same values (a rotary cos recomputed in every layer) or whose Mean and
Norm are the same (a softmax over scores with a finfo.min mask: Mean -inf, Norm inf in every layer).

Two ways in which msprobe's grouping hides a difference it should not, done otherwise here: it
leaves a list argument out of the comparison altogether (every `torch.cat([...], dim=-1)` is one
call to it, whatever it joins; every conv2d one, whatever its stride), and it keeps the Max and Min
of a tensor passed by keyword. Here the whole call is compared, lists too, with the Max and Min of
every tensor taken out, wherever it is.

A backward entry is checked by running its call forward again and its gradient back: it stands for
another only where both the forward call and the gradients it receives are equal but for Max and Min
(msprobe does not check the backward of a call it filtered out at all).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .dump import BACKWARD, EntryName

IGNORED = ("Max", "Min")  # the statistics msprobe's -f takes out of a call before comparing


def without_extremes(value: Any) -> Any:
    """The value with the Max and Min of every tensor spec in it taken out, at any depth."""
    if isinstance(value, dict):
        spec = "dtype" in value and "shape" in value
        return {k: without_extremes(v) for k, v in value.items() if not (spec and k in IGNORED)}
    if isinstance(value, list):
        return [without_extremes(v) for v in value]
    return value


def _canonical(value: Any) -> str:
    # Keys sorted (a dump writes kwargs in call order); NaN and inf as their words, so two calls
    # that both recorded a NaN Mean are equal, as they read.
    return json.dumps(without_extremes(value), sort_keys=True, allow_nan=True, ensure_ascii=True)


def group_key(entries: Mapping[str, Any], name: EntryName) -> tuple[str, ...] | None:
    """What two entries of the same API share when one may stand for the other; None for an entry
    whose body is not an object (its check says what is wrong with it)."""
    forward = entries.get(f"{name.prefix}.forward")
    key = [f"{name.api_type}.{name.api}", name.direction]
    if forward is not None:
        if not isinstance(forward, dict):
            return None
        key.append(_canonical([forward.get("input_args"), forward.get("input_kwargs")]))
    if name.direction == BACKWARD:
        body = entries.get(name.full)
        if not isinstance(body, dict):
            return None
        key.append(_canonical(body.get("input")))
    return tuple(key)
