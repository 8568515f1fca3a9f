"""`imgbuild prune`: remove the images imgbuild made, found by their labels, and say how much that freed."""

from __future__ import annotations

import os
import socket

import docker
import docker.errors

from .bytecode import COMPILE_LABEL, owner
from .client import containers, remove_containers
from .step import STEP_LABEL

# `imgbuild test`'s containers (checks/smoke), labelled with their run ("host:pid"): Ctrl-C removes this run's,
# not another's on the same host; the next run or `imgbuild prune` those of a run that was killed.
TEST_LABEL = "io.imgbuild.test"
RUN = owner()

VARIANT_LABEL = "io.imgbuild.variant"
STAGE_LABEL = "io.imgbuild.stage"  # builder stages older imgbuild releases left behind (untagged)
BASE_LABEL = "io.imgbuild.base"
TITLE_LABEL = "org.opencontainers.image.title"  # "<image name> <flavour>"


def layers_size(client: docker.DockerClient) -> int:
    return int(client.df().get("LayersSize") or 0)


def prune(client: docker.DockerClient, bases: bool, dry_run: bool, name: str | None = None) -> tuple[list[str], int]:
    """Remove every image labelled as a variant or a build stage (and bootstrapped bases with `bases`); with
    `name`, only the variants of that image name (one matrix's images, tagged or left untagged by a rebuild).
    Removing an image also removes its untagged parents, the classic builder's cache. Returns the refs
    removed and the bytes freed."""
    labels = [VARIANT_LABEL, STAGE_LABEL, BASE_LABEL] if bases else [VARIANT_LABEL, STAGE_LABEL]
    if name is not None:
        labels.remove(STAGE_LABEL)
    images = {str(i.id): i for label in labels for i in client.images.list(filters={"label": label})
              if name is None or (label == BASE_LABEL and VARIANT_LABEL not in i.labels)
              or i.labels.get(TITLE_LABEL, "").startswith(f"{name} ")}
    # Children first: a jupyter image sits on its runtime image.
    ordered = sorted(images.values(), key=lambda i: len(i.history()), reverse=True)
    names = [", ".join(i.tags) or str(i.id)[:19] for i in ordered]
    if dry_run:
        return names, 0
    before = layers_size(client)
    for image in ordered:
        try:
            client.images.remove(str(image.id), force=True)
        except docker.errors.ImageNotFound:
            continue
    return names, max(0, before - layers_size(client))


def _ended(run: str) -> bool:
    """Whether the run named "host:pid" has ended: on this host, no such process. A run of another host (a
    shared engine), or whose process is still there, is left alone."""
    host, _, pid = run.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return host == "" and pid == "1"  # an older imgbuild's label, which names no run
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


# The containers a run starts and removes itself, labelled with the run ("host:pid"), by what they are for.
RUN_LABELS = {COMPILE_LABEL: "a compile container", STEP_LABEL: "a build step's container",
              TEST_LABEL: "a test container"}


def leftover_containers(client: docker.DockerClient, dry_run: bool = False) -> list[str]:
    """Remove the containers of runs that ended without removing them (a kill -9, an OOM kill): bytecode
    compiles (engine/bytecode), build steps (engine/step) and `imgbuild test`'s; each as "SHORT_ID (what it was)"."""
    gone = []
    for label, what in RUN_LABELS.items():
        for c in containers(client, label):
            # one at a time, so that a container the engine removed meanwhile is not reported
            if _ended(c.labels.get(label, "")) and (dry_run or remove_containers(client, [c.id])):
                gone.append(f"{c.id[:12]} ({what} that an ended run left)")
    return gone
