"""LLM-width dumps (make_dump.py) and the bare work of their entries (bare.py): issues 27 and 32."""
