"""Image config facts imgbuild decides, pure: its times (`iso`), whether an image was written by imgbuild
(created at the epoch, where the classic builder stamps the build's time), and a config without what the
classic builder stamps per build (`comparable_config`, which `verify-repro` compares)."""

from __future__ import annotations

import json
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
