"""Whether a wheel has kernels for a GPU, table-tested without a GPU."""

from __future__ import annotations

import pytest

from smoke_tests.archs import kernels_for

CU126 = ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90")
CU128 = ("sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120")


@pytest.mark.parametrize(
    ("capability", "archs", "ptx", "expected"),
    [
        ((8, 9), CU126, False, "sm_86"),  # an L4/RTX 4090 runs sm_86 cubins
        ((9, 0), CU126, False, "sm_90"),  # H100/H200
        ((8, 0), CU126, False, "sm_80"),
        ((10, 0), CU126, False, None),  # B200: cu126 has nothing
        ((12, 0), CU126, False, None),  # RTX 5090
        ((12, 0), CU128, False, "sm_120"),
        ((6, 1), CU128, False, None),  # Pascal dropped by cu128
        ((9, 0), ("sm_80", "sm_90a"), False, "sm_90a"),  # arch-specific cubins run on exactly 9.0
        ((9, 1), ("sm_90a",), False, None),
        ((10, 0), ("sm_80", "sm_90"), True, "sm_90 (PTX, JIT-compiled)"),  # PTX covers newer
        ((7, 0), ("sm_80",), True, None),  # PTX never runs on older
    ],
)
def test_kernels_for(capability: tuple[int, int], archs: tuple[str, ...], ptx: bool, expected: str | None) -> None:
    assert kernels_for(capability, archs, ptx) == expected
