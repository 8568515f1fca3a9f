"""locks/<variant>.txt: parsed strictly, and split into the image's wheel layers."""

from __future__ import annotations

import pytest

from builder.errors import UserError
from builder.pins import lockfile

from ..helpers import lock_text


def test_a_lock_splits_into_the_image_layers() -> None:
    text = lock_text("https://example.org/simple", {
        "numpy": ("2.0", ["a" * 64]), "nvidia-cublas-cu12": ("12.6", ["b" * 64]), "torch": ("2.7.1", ["c" * 64]),
        "triton": ("3.3.1", ["d" * 64]), "nvidia-nccl-cu12": ("2.26.2", ["e" * 64, "f" * 64])})
    lock = lockfile.parse(text, "x.txt")
    assert lock.indexes == ("https://example.org/simple",)
    layers = lockfile.layers(lock)
    assert list(layers) == ["nvidia", "torch", "rest"]
    assert layers["nvidia"].splitlines()[0] == "nvidia-cublas-cu12==12.6 \\"
    assert "nvidia-nccl-cu12==2.26.2" in layers["nvidia"] and "f" * 64 in layers["nvidia"]
    assert layers["torch"].startswith("torch==2.7.1") and "triton==3.3.1" in layers["torch"]
    assert layers["rest"].startswith("numpy==2.0")
    below = lockfile.parse(lock_text("https://example.org/simple", {"numpy": ("2.0", ["a" * 64])}), "y.txt")
    assert lockfile.added(lock, below).count("==") == 4, "what the lock pins beyond the runtime's"


def test_an_unhashed_line_is_a_clear_error() -> None:
    with pytest.raises(UserError, match=r"^x.txt: 'numpy==2.0' is not a pinned, hashed requirement; run "
                                        r"`imgbuild lock` again$"):
        lockfile.parse("numpy==2.0\n", "x.txt")
