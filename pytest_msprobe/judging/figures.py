"""Numbers in messages: as short as they can be while they still say what they mean.

`MaxAbsErr 0.0001 >= 0.0001` for an error of 0.0001001 reads as a tie the rule
should not fail: a value compared with a bound gets the digits that show on which
side of the bound it is. No pytest, no framework.
"""

from __future__ import annotations

import math


def beside(value: float, bound: float, digits: int = 3) -> str:
    """`value` in `digits` significant digits, or more where fewer would put it on the other side
    of `bound` or on it: 0.0001001 beside 0.0001 is `0.0001001`, 0.98999 beside 0.99 `0.98999`."""
    if not (math.isfinite(value) and math.isfinite(bound)):
        return f"{value:.{digits}g}"
    for precision in range(digits, 18):
        text = f"{value:.{precision}g}"
        shown = float(text)
        if (shown < bound) == (value < bound) and (shown == bound) == (value == bound):
            return text
    return repr(value)
