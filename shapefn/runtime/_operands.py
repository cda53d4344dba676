"""The builder's operand types: registers, labels, device names and dtypes.
Apart from ``builder`` so that its generated instruction methods
(``_instructions.py``), which the builder imports, can name them."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

DeviceName = Literal["host", "device", "any"] | int
DTypeLike = str | np.dtype


@dataclass(frozen=True)
class Reg:
    index: int

    def __repr__(self) -> str:
        return f"%{self.index}"


class Label:
    """A jump target; ``FunctionBuilder.place(label)`` fixes where it is."""

    def __init__(self) -> None:
        self.position: int | None = None
