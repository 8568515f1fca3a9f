"""Image configs as imgbuild decides them, pure: the config it writes (`canonical_config`), a base's identity
on any engine (`Base`), its times (`iso`), whether an image was written by imgbuild (created at the epoch,
where the classic builder stamps the build's time), and a config without what the classic builder stamps
per build (`comparable_config`, which `verify-repro` compares)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timezone


def iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def at_epoch(attrs: dict[str, object], epoch: int) -> bool:
    """An image imgbuild wrote was created at the epoch (`Created` of the engine's inspect, or the config's
    `created`); the builder's own carries the build time."""
    return str(attrs.get("Created", "")).startswith(iso(epoch)[:-1])


def comparable_config(config: dict[str, object], epoch: int) -> bytes:
    """The config without what the classic builder stamps per build: times and intermediate IDs."""
    out = dict(config)
    out["created"] = iso(epoch)
    out["history"] = [{**h, "created": iso(epoch)} for h in config.get("history", [])]  # type: ignore[attr-defined]
    out.pop("container", None)
    out.pop("container_config", None)
    inner = dict(config.get("config") or {})  # type: ignore[call-overload]
    inner["Image"], inner["Hostname"] = "", ""
    out["config"] = inner
    return json.dumps(out, sort_keys=True, separators=(",", ":")).encode()


_CONFIG_KEYS = ("User", "ExposedPorts", "Env", "Entrypoint", "Cmd", "Volumes", "WorkingDir", "Labels",
                "StopSignal", "Healthcheck", "Shell", "ArgsEscaped")


def canonical_config(config: dict[str, object], diff_ids: list[str], epoch: int) -> bytes:
    """The config as imgbuild writes it, from the OCI image spec's fields: the engine's own keys
    (docker_version, container_config) and times left out, the layers those given."""
    inner = config.get("config") or {}
    assert isinstance(inner, dict)
    out: dict[str, object] = {
        "architecture": config.get("architecture", "amd64"),
        "os": config.get("os", "linux"),
        "created": iso(epoch),
        "config": {k: inner[k] for k in _CONFIG_KEYS if inner.get(k)},
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "history": [{k: v for k, v in {"created": iso(epoch), "created_by": h.get("created_by"),
                                       "empty_layer": h.get("empty_layer")}.items() if v}
                    for h in config.get("history", []) or []],  # type: ignore[attr-defined]
    }
    if config.get("variant"):
        out["variant"] = config["variant"]
    return json.dumps(out, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Base:
    """What a build stands on, the same on every engine and in a registry: the digest of its config written
    canonically with no times (an image ID is the config's digest on the graph-driver store, but a manifest's
    on the containerd store), and how many layers it has."""

    identity: str
    layers: int

    @staticmethod
    def of(config: dict[str, object]) -> Base:
        diff_ids = list(config.get("rootfs", {}).get("diff_ids") or [])  # type: ignore[attr-defined]
        return Base("sha256:" + hashlib.sha256(canonical_config(config, diff_ids, 0)).hexdigest(), len(diff_ids))
