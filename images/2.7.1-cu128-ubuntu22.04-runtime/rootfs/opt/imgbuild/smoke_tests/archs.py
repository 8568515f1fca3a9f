"""Whether a wheel has kernels for a GPU: the CUDA binary-compatibility rules, as data in, answer out."""

from __future__ import annotations


def parse_arch(arch: str) -> tuple[int, int, str]:
    """'sm_90a' -> (9, 0, 'a'); 'sm_120' -> (12, 0, '')."""
    digits = arch.removeprefix("sm_").removeprefix("compute_")
    suffix = digits[-1] if digits[-1].isalpha() else ""
    digits = digits.rstrip("abcdefghijklmnopqrstuvwxyz")
    return int(digits[:-1]), int(digits[-1]), suffix


def kernels_for(capability: tuple[int, int], archs: list[str] | tuple[str, ...], ptx: bool) -> str | None:
    """The architecture whose code runs on a device of this compute capability, or None.

    A cubin for sm_XY runs on any sm_XZ with Z >= Y (same major); arch-specific ones (sm_90a) run only on
    exactly that capability. PTX of an older architecture is JIT-compiled for any newer device.
    """
    major, minor = capability
    best: tuple[int, str] | None = None
    for arch in archs:
        a_major, a_minor, suffix = parse_arch(arch)
        if suffix and (a_major, a_minor) != capability:
            continue
        if a_major == major and a_minor <= minor and (best is None or a_minor > best[0]):
            best = (a_minor, arch)
    if best is not None:
        return best[1]
    if ptx:
        older = [a for a in archs if parse_arch(a)[:2] <= capability and not parse_arch(a)[2]]
        if older:
            return f"{max(older, key=parse_arch)} (PTX, JIT-compiled)"
    return None
