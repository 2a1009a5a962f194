"""Every torch_npu operator's CPU reference, looked up by name: npu_reference's (the fused training
ops) and npu_llm_reference's (LLM and MoE operators), which registers its own in npu_reference's tables
on import. Import the tables from here, never from npu_reference alone, to see both."""

from . import npu_llm_reference  # noqa: F401 - registers its references in npu_reference's tables
from .npu_builtins import UNCOMPARED_OUTPUTS
from .npu_reference import PADDED_ROWS, REFERENCES, ReferenceUnsupported, lookup

__all__ = ["PADDED_ROWS", "REFERENCES", "UNCOMPARED_OUTPUTS", "ReferenceUnsupported", "lookup"]
