#!/usr/bin/env python3
"""Write shaders/blocks/iq_tables.glsl from the gguf package's i-quant tables
(vkq/iq_tables.py). tests/test_iq_tables.py checks the committed file."""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vkq.iq_tables import render_glsl  # noqa: E402

OUT = ROOT / "shaders" / "blocks" / "iq_tables.glsl"

if __name__ == "__main__":
    OUT.write_text(render_glsl())
    print(f"wrote {OUT.relative_to(ROOT)}")
