"""The pipeline's registry-side steps: look a variant's build inputs up in staging and in the public registry
(`imgbuild lookup`), and promote a tested staged digest to the public tags as it is (`imgbuild promote`).

A staged image is found by its build-hash tag, which stays in staging: the public tags are the variant's tags
and aliases only. An image is "published" when its primary public tag serves the staged digest: it was tested
and promoted before, so an unchanged variant needs neither a build nor a pull, only the registry-side copy
and its check.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .. import patterns
from ..dockerfile.context import hash_ref
from ..errors import UserError
from ..matrix.resolve import Resolution
from ..matrix.variant import Variant
from ..oci.config import Base
from ..registry import skopeo as registry
from .push import target_refs


@dataclass(frozen=True)
class Lookup:
    variant: str
    build_hash: str
    ref: str  # the build-hash tag in staging
    digest: str | None  # what that tag serves now; None when staging has no image of these inputs
    image_id: str | None
    published: bool  # the primary public tag serves that digest


@dataclass(frozen=True)
class Promoted:
    variant: str
    digest: str
    refs: tuple[str, ...]


def lookup(v: Variant, build_hash: str, staging: str, public: str | None) -> Lookup:
    ref = hash_ref(v, staging, build_hash)
    raw = registry.raw_manifest(ref)  # one read gives both the digest and the image ID
    digest = registry.digest_of(raw) if raw is not None else None
    image_id = registry.config_of(raw, ref) if raw is not None else None
    published = bool(digest and public and registry.digest(target_refs(v, public)[0]) == digest)
    return Lookup(v.name, build_hash, ref, digest, image_id, published)


def parent_base(v: Variant, parent: str) -> tuple[str, Base]:
    """A child image's FROM reference and its parent's identity, read from the registry: what `inputs` takes
    so that a child's build hash is known without pulling its runtime image."""
    if not patterns.matches(patterns.DIGEST_REF, parent):
        raise UserError(f"--parent {parent!r}: expected REPOSITORY@sha256:DIGEST, the runtime image's staged digest")
    if not v.parent_ref:
        raise UserError(f"--parent: {v.name} is not built on another image of the matrix")
    return v.parent_ref, Base.of(registry.config(parent))


def write_lookup(path: Path, found: Lookup) -> None:
    path.write_text(json.dumps(asdict(found), indent=2) + "\n")


def _read(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: cannot read the {what} ({exc}); it comes from the job before") from None


def staged_entry(path: Path) -> tuple[str, str, str]:
    """(variant, repository, digest) of the one image a staging push or lookup wrote to `path`."""
    data = _read(path, "staged image")
    entry = data[0] if isinstance(data, list) and data else data
    try:
        variant, digest, ref = entry["variant"], entry["digest"], entry["tags"][0]
    except (KeyError, IndexError, TypeError):
        raise UserError(f"{path}: expected [{{variant, digest, tags}}] as `imgbuild push --json` writes") from None
    if not patterns.matches(patterns.DIGEST, str(digest)):
        raise UserError(f"{path}: digest {digest!r} is not sha256:<64 hex>")
    return str(variant), str(ref).rsplit(":", 1)[0], str(digest)


def tested_digest(path: Path, variant: str) -> str:
    data = _read(path, "tested digest")
    if not isinstance(data, dict) or data.get("variant") != variant:
        raise UserError(f"{path}: names {data.get('variant') if isinstance(data, dict) else data!r}, not {variant}")
    digest = str(data.get("digest"))
    if not patterns.matches(patterns.DIGEST, digest):
        raise UserError(f"{path}: digest {digest!r} is not sha256:<64 hex>")
    return digest


def promote(res: Resolution, staged: Path, tested: Path, public: str, copy: bool) -> Promoted:
    """Copy the staged digest to every public tag of its variant (`copy`), then read every tag back: each must
    serve exactly the digest the GPU job tested."""
    name, repository, digest = staged_entry(staged)
    try:
        v = res.variant(name)
    except StopIteration:
        raise UserError(f"{staged}: variant {name} is not in {res.facts.file}") from None
    want = tested_digest(tested, name)
    if want != digest:
        raise UserError(f"{name}: staged {digest} is not the tested {want}; nothing promoted")
    refs = target_refs(v, public)
    if copy:
        for ref in refs:
            registry.copy(f"{repository}@{digest}", ref)
    wrong = [f"{ref} serves {served or 'nothing'}" for ref in refs if (served := registry.digest(ref)) != want]
    if wrong:
        raise registry.RegistryError(f"{name}: not the tested {want}: " + "; ".join(wrong))
    return Promoted(name, want, refs)
