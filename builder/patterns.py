"""Strict patterns for every value that can reach a Dockerfile, a tag or a shell.

A matrix file must not be able to inject Dockerfile instructions: each pattern admits no whitespace, quote,
newline or shell metacharacter, except NOTE, which never reaches a Dockerfile and still refuses control
characters and quotes.
"""

from __future__ import annotations

import re

VERSION = re.compile(r"\d+(\.\d+){0,3}")
CUDA_LINE = re.compile(r"\d+\.\d+")
NAME = re.compile(r"[a-z][a-z0-9]*(?:[._-][a-z0-9]+)*")
OS_NAME = re.compile(r"[a-z]+\d+(\.\d+)?")
WHEEL = re.compile(r"cu\d{3}")
PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a Python distribution name
DEB_PACKAGE = re.compile(r"[a-z0-9][a-z0-9+.-]+")  # Debian policy 5.6.1
ARCH = re.compile(r"sm_\d+a?")
REQUIRE_CUDA = re.compile(r"cuda>=\d+\.\d+")
MAJOR = re.compile(r"\d+")
DATE = re.compile(r"\d{4}-\d{2}(-\d{2})?")
DRIVER = re.compile(r"\d+\.\d+(\.\d+)?")
SPDX = re.compile(r"[A-Za-z0-9.+-]+( (AND|OR) [A-Za-z0-9.+-]+)*")
DOCKER_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
NOTE = re.compile(r"[^\x00-\x1f\x7f\"`\\$]{1,400}")
# Docker's reference grammar (distribution/reference), without the optional scheme-less oddities we do not need.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN = r"(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*(?::\d+)?"
REPOSITORY = re.compile(rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*")
IMAGE_REF = re.compile(rf"{REPOSITORY.pattern}(?::[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})?(?:@sha256:[a-f0-9]{{64}})?")
DIGEST = re.compile(r"sha256:[a-f0-9]{64}")
DIGEST_REF = re.compile(rf"{REPOSITORY.pattern}@sha256:[a-f0-9]{{64}}")  # an image pinned by digest alone
SHA256_HEX = re.compile(r"[a-f0-9]{64}")
WHEEL_FILE = re.compile(r"[A-Za-z0-9_.+-]+\.whl")
REGISTRY = re.compile(rf"{_DOMAIN}(?:/{_COMPONENT})*")
# Package archives are fetched over plain HTTP too: apt checks their GPG signatures.
MIRROR = re.compile(r"https?://[A-Za-z0-9.-]+(?::\d+)?(?:/[A-Za-z0-9._~%/+-]*)?")
URL = re.compile(r"https://[A-Za-z0-9.-]+(?::\d+)?(?:/[A-Za-z0-9._~%/+-]*)?")
TAG_TEMPLATE = re.compile(r"(?:[A-Za-z0-9_.-]|\{(?:torch|cuda|cudnn_major|os|flavor|python|wheel)\})+")


def matches(pattern: re.Pattern[str], value: str) -> bool:
    """True when the whole value matches (never a prefix)."""
    return pattern.fullmatch(value) is not None
