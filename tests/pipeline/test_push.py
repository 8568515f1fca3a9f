"""`imgbuild push` against a real registry: Debian's docker-registry on 127.0.0.1, started per test with the
configuration the test needs (plain, htpasswd, read-only), and a small image built from the same templates
(only its lock is small). The engine treats 127.0.0.0/8 registries as insecure, so plain HTTP works there."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from builder.checks import records
from builder.engine import client as engine
from builder.engine.canonical import STAGING_LABEL
from builder.registry import skopeo as registry_client

from ..conftest import imgbuild, imgbuild_started, remove_made
from ..helpers import SMALL_VARIANT, flaky_proxy, proxy_host, registry, small_project

pytestmark = [pytest.mark.engine, pytest.mark.network]

NAME = "imgbuild-test-push"
TAGS = ("2.7.1-cuda12.4-cudnn9-debian12-runtime", "2.7.1-cuda12.6-cudnn9-debian12-runtime")


@pytest.fixture(scope="module")
def client() -> Iterator[docker.DockerClient]:
    c = engine.connect()
    yield c
    remove_made(c, NAME)
    for image in c.images.list():  # the same image pulled under a registry's name
        if any(NAME in tag for tag in image.tags):
            c.images.remove(str(image.id), force=True)
    c.close()


@pytest.fixture(scope="module")
def small_image(client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    directory = tmp_path_factory.mktemp("push-project")
    matrix = small_project(directory, NAME)
    built = imgbuild("build", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--ca-bundle",
                     "/etc/ssl/certs/ca-certificates.crt", "--log-dir", str(directory / "logs"), timeout=1200)
    assert built.returncode == 0, built.stderr[-3000:]
    return matrix, str(client.images.get(f"{NAME}:{TAGS[1]}").id)


def test_push_publishes_every_tag_on_one_digest_and_reads_it_back(client: docker.DockerClient,
                                                                  small_image: tuple[Path, str],
                                                                  tmp_path: Path) -> None:
    matrix, image_id = small_image
    with registry(tmp_path) as host:
        result = imgbuild("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry",
                          f"{host}/ml", "--json", str(tmp_path / "published.json"), "--force", timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        pushed = re.findall(rf"^pushed {re.escape(host)}/ml/{NAME}:(\S+)@(sha256:[0-9a-f]{{64}})$", result.stdout,
                            flags=re.M)
        build_tag = "build-" + client.images.get(image_id).labels["io.imgbuild.build-hash"].removeprefix("sha256:")
        assert sorted(tag for tag, _ in pushed) == sorted([*TAGS, build_tag]), "the tags, and the build hash's"
        digests = {digest for _, digest in pushed}
        assert len(digests) == 1, "every tag names the same manifest"
        digest = digests.pop()
        published = json.loads((tmp_path / "published.json").read_text())
        assert published == [{"variant": SMALL_VARIANT, "image_id": image_id, "digest": digest,
                              "tags": [f"{host}/ml/{NAME}:{tag}" for tag in (*TAGS, build_tag)],
                              "expected": "none"}]  # not a canonical image with committed digests
        assert not any(tag.startswith(host) for tag in client.images.get(image_id).tags), "no registry tags left here"
        pulled = client.images.pull(f"{host}/ml/{NAME}@{digest}")
        assert pulled.id == image_id, "the same config, so the same image ID"
        assert pulled.labels == client.images.get(image_id).labels
        assert pulled.labels["io.imgbuild.variant"] == SMALL_VARIANT
        client.images.remove(f"{host}/ml/{NAME}@{digest}")


def test_an_untested_image_is_refused_unless_forced(small_image: tuple[Path, str], tmp_path: Path) -> None:
    matrix, image_id = small_image
    with registry(tmp_path) as host:
        result = imgbuild("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry", host,
                          env={"XDG_STATE_HOME": str(tmp_path / "state")})
        assert result.returncode == 1
        assert (f"imgbuild: error: {SMALL_VARIANT}: not pushed: the smoke tests were never run on it for image "
                f"{image_id[:19]}; run `imgbuild test --variant {SMALL_VARIANT}`, or pass --force") in result.stderr
        assert "pushed " not in result.stdout


def test_the_push_gate_takes_a_passed_test_record_and_refuses_a_failed_one(small_image: tuple[Path, str],
                                                                          tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """What `imgbuild test` records for the image ID decides, without --force: a failed run refuses the push,
    naming its failures; a passed one lets it through. (The record is written as `imgbuild test` writes it: the
    small variant carries no torch for the suite to pass on.)"""
    matrix, image_id = small_image
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    env = {"XDG_STATE_HOME": str(tmp_path / "state")}
    with registry(tmp_path) as host:
        records.write(records.TestRecord(image_id, SMALL_VARIANT, False, {"PASS": 30, "FAIL": 2, "SKIP": 12}, "CPU"))
        refused = imgbuild("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry", f"{host}/ml",
                           env=env)
        assert refused.returncode == 1, refused.stderr[-2000:]
        assert (f"{SMALL_VARIANT}: not pushed: the smoke tests failed (2 FAIL) for image {image_id[:19]}"
                in refused.stderr), refused.stderr
        assert "pushed " not in refused.stdout
        records.write(records.TestRecord(image_id, SMALL_VARIANT, True, {"PASS": 32, "FAIL": 0, "SKIP": 12}, "CPU"))
        passed = imgbuild("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry", f"{host}/ml",
                          env=env, timeout=600)
        assert passed.returncode == 0, passed.stderr[-3000:]
        assert re.search(rf"^pushed {re.escape(host)}/ml/{NAME}:{re.escape(TAGS[1])}@sha256:[0-9a-f]{{64}}$",
                         passed.stdout, flags=re.M), passed.stdout


def test_a_wrong_password_fails_clearly_after_one_attempt(small_image: tuple[Path, str], tmp_path: Path) -> None:
    matrix, _ = small_image
    htpasswd = tmp_path / "htpasswd"
    subprocess.run(["htpasswd", "-Bbc", str(htpasswd), "ci", "right-password"], check=True, capture_output=True)
    with registry(tmp_path, htpasswd=htpasswd) as host:
        args = ("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry", host, "--force",
                "--password-stdin")
        wrong = imgbuild(*args, env={"IMGBUILD_REGISTRY_USER": "ci"}, stdin="wrong-password\n", timeout=600)
        assert wrong.returncode == 1
        assert "authentication failed" in wrong.stderr and "not retried: check the credentials" in wrong.stderr
        assert "retrying" not in wrong.stderr, "an auth failure is never retried"
        assert "wrong-password" not in wrong.stdout + wrong.stderr, "the password is never printed"
        right = imgbuild(*args, env={"IMGBUILD_REGISTRY_USER": "ci"}, stdin="right-password\n", timeout=600)
        assert right.returncode == 0, right.stderr[-2000:]
        assert "right-password" not in right.stdout + right.stderr
        assert right.stdout.count("pushed ") == 3, "both tags and the build hash's"


def test_a_registry_that_goes_away_mid_push_fails_after_the_retries(small_image: tuple[Path, str],
                                                                    tmp_path: Path) -> None:
    matrix, _ = small_image
    with registry(tmp_path) as host:
        proc = imgbuild_started("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry", host,
                                "--force")
        assert proc.stderr is not None
        lines = []
        for line in proc.stderr:
            lines.append(line)
            if ": Copying blob " in line:
                break
        # Leaving the context manager kills the registry while the layers are going up.
    err = "".join(lines) + proc.stderr.read()
    proc.wait(timeout=600)
    assert proc.returncode == 1, err
    assert len(re.findall(r"attempt \d/4 failed: .*; retrying in \d+s", err)) == 3, err
    assert re.search(r"push failed \(after 4 attempts\): ", err), err


def test_a_read_only_registry_is_a_clear_error_not_retried(small_image: tuple[Path, str], tmp_path: Path) -> None:
    matrix, _ = small_image
    with registry(tmp_path, readonly=True) as host:
        result = imgbuild("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry", host,
                          "--force", timeout=600)
    assert result.returncode == 1
    assert re.search(r"push failed \(not retried: not a connection failure\): .*; the registry refuses writes "
                     r"\(HTTP 405: read-only, or a pull-through mirror\)$", result.stderr, flags=re.M), result.stderr
    assert "retrying" not in result.stderr


def test_a_build_of_the_same_inputs_pulls_from_the_registry_instead(client: docker.DockerClient,
                                                                    small_image: tuple[Path, str],
                                                                    tmp_path: Path) -> None:
    """Last in this module, as it removes the image the others push. A fresh runner: the image is not here,
    the registry has it under its build hash; the build pulls it (the same image ID) instead of building. A
    registry image whose config is not the committed one is not taken, and a registry without it means a real
    build."""
    matrix, image_id = small_image
    with registry(tmp_path) as host:
        empty = f"{host}/empty"
        pushed = imgbuild("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry", f"{host}/ml",
                          "--force", timeout=600)
        assert pushed.returncode == 0, pushed.stderr[-3000:]
        client.images.remove(image_id, force=True)  # every tag, and the build cache below: nothing to reuse
        result = imgbuild("build", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry", f"{host}/ml",
                          "--json", str(tmp_path / "pulled.json"), "--log-dir", str(tmp_path / "logs"), timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads((tmp_path / "pulled.json").read_text())[0]["status"] == "pulled"
        assert not (tmp_path / "logs").exists(), "no build ran"
        image = client.images.get(f"{NAME}:{TAGS[1]}")
        assert image.id == image_id, "the pushed image itself"
        assert sorted(image.tags) == sorted(f"{NAME}:{tag}" for tag in TAGS), "no build-hash tag left here"
        # A canonical build's registry image whose config is not the committed one is not taken (and the
        # build then fails its own check against those digests, leaving its image untagged).
        canonical = ("build", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--log-dir",
                     str(tmp_path / "logs"))
        result = imgbuild(*canonical, "--force", "--json", str(tmp_path / "canonical.json"), timeout=1200)
        assert result.returncode == 0, result.stderr[-3000:]
        canonical_id = json.loads((tmp_path / "canonical.json").read_text())[0]["image_id"]
        pushed = imgbuild("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry", f"{host}/ml",
                          "--force", timeout=600)
        assert pushed.returncode == 0, pushed.stderr[-3000:]
        client.images.remove(canonical_id, force=True)
        committed = matrix.parent / "locks" / f"{SMALL_VARIANT}.digests.json"
        committed.write_text(json.dumps({"shaping": "other", "config": "sha256:" + "0" * 64, "layers": []}))
        refused = imgbuild(*canonical, "--registry", f"{host}/ml", "--json", str(tmp_path / "refused.json"),
                           timeout=1200)
        committed.unlink()
        row = json.loads((tmp_path / "refused.json").read_text())[0]
        if row.get("image_id"):
            client.images.remove(row["image_id"], force=True)
        assert "not the committed sha256:000000000000 (pushed from a build that was not canonical?)" in \
            refused.stdout + refused.stderr, refused.stdout[-2000:] + refused.stderr[-2000:]
        assert (refused.returncode, row["status"]) == (1, "failed"), row
        # every build writes the same bytes: the --force build above was this very image, removed with it
        assert canonical_id == image_id
        assert engine.image_or_none(client, image_id) is None
        missing = imgbuild("build", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry", empty,
                           "--json", str(tmp_path / "missing.json"), timeout=1200)
        assert missing.returncode == 0, missing.stderr[-3000:]
        assert f"not in {empty}; building" in missing.stdout + missing.stderr
        assert json.loads((tmp_path / "missing.json").read_text())[0]["status"] == "built"


def test_a_second_push_of_the_same_bytes_compresses_nothing_and_a_damaged_blob_is_made_again(
        small_image: tuple[Path, str], tmp_path: Path) -> None:
    matrix, _ = small_image
    cache = tmp_path / "blobs"
    env = {"IMGBUILD_BLOB_CACHE": str(cache)}
    from_cache, manifests = [], []
    with registry(tmp_path) as host:
        for repository in ("first", "second", "third"):
            if repository == "third":  # the largest cached blob cut short, as a full disk would leave it
                biggest = max((cache / "sha256").iterdir(), key=lambda p: p.stat().st_size)
                biggest.unlink()
                biggest.write_bytes(b"cut short")
            result = imgbuild("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry",
                              f"{host}/{repository}", "--force", timeout=600, env=env)
            assert result.returncode == 0, result.stderr[-3000:]
            from_cache.append("every blob taken from the blob cache, checked: nothing compressed" in result.stderr)
            manifests.append(set(re.findall(r"@(sha256:[0-9a-f]{64})$", result.stdout, flags=re.M)))
    assert from_cache == [False, True, False], "compressed, then taken from the cache, then made again"
    assert len(manifests[0]) == 1 and manifests[0] == manifests[1] == manifests[2], manifests
    assert biggest.stat().st_size > len(b"cut short"), "the damaged blob was written whole again"


def test_a_build_that_keeps_its_layers_gives_the_push_the_same_manifest_without_reading_them_back(
        client: docker.DockerClient, small_image: tuple[Path, str], tmp_path: Path) -> None:
    """`build --keep-layers` copies each layer it writes (all above the base) into the blob cache, named by
    its diffID; the push compresses those copies, reads from the engine only the base's layers (through an
    image of those alone, removed after), publishes the manifest a push that reads the whole image publishes,
    and drops the copies. A copy altered since is not trusted: that layer is read from the engine instead."""
    matrix, image_id = small_image
    diff_ids = client.images.get(image_id).attrs["RootFS"]["Layers"]
    counts, manifests, copies = [], [], []
    with registry(tmp_path) as host:
        for case in ("plain", "kept", "altered"):
            cache = tmp_path / case
            env = {"IMGBUILD_BLOB_CACHE": str(cache)}
            if case != "plain":
                built = imgbuild("build", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--force",
                                 "--keep-layers", "--log-dir", str(tmp_path / "logs"), timeout=1200, env=env)
                assert built.returncode == 0, built.stderr[-3000:]
                assert str(client.images.get(f"{NAME}:{TAGS[1]}").id) == image_id, "the same image"
                kept = sorted((cache / "raw").iterdir(), key=lambda p: p.stat().st_size)
                copies.append(len(kept))
                assert ["sha256:" + p.name for p in kept if "sha256:" + p.name not in diff_ids] == []
                if case == "altered":  # one byte of the largest copy changed, as another tool might
                    with kept[-1].open("r+b") as f:
                        f.seek(kept[-1].stat().st_size // 2)
                        byte = f.read(1)
                        f.seek(-1, 1)
                        f.write(bytes([byte[0] ^ 1]))
            result = imgbuild("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry",
                              f"{host}/{case}", "--force", timeout=600, env=env)
            assert result.returncode == 0, result.stderr[-3000:]
            said = re.search(r"(\d+) layers compressed from the build's copies, (\d+) read from the engine",
                             result.stderr)
            assert said, result.stderr[-2000:]
            counts.append((int(said[1]), int(said[2])))
            manifests.append(set(re.findall(r"@(sha256:[0-9a-f]{64})$", result.stdout, flags=re.M)))
            assert not list((cache / "raw").glob("*")), "the copies are compressed now: dropped"
    base = len(diff_ids) - copies[0]
    assert copies[0] == copies[1] > 0 and base > 0, (copies, len(diff_ids))
    assert counts[0] == (0, len(set(diff_ids))), counts
    assert counts[1] == (copies[0], len(set(diff_ids[:base]))), "the base's layers alone read from the engine"
    assert counts[2][0] == copies[0] - 1 and counts[2][1] > counts[1][1], counts
    assert len(manifests[0]) == 1 and manifests[0] == manifests[1] == manifests[2], manifests
    assert client.images.list(filters={"label": STAGING_LABEL}) == [], "no image of the base's layers left"


def test_a_registry_that_answers_slowly_and_with_5xx_at_random_gets_the_push_and_the_lookup_through(
        client: docker.DockerClient, small_image: tuple[Path, str], tmp_path: Path) -> None:
    """A proxy in front of the registry delays every request and answers 502/503/504 at random. Failing more
    than the retries outlast, the push fails naming the attempts and publishes no tag; run again, it retries
    what fails, publishes every tag on one manifest; and a fresh runner's build finds the image through the
    same proxy and pulls it (the lookup and the pull retried too). Last in this module: it removes the image
    and gets it back from the registry."""
    matrix, _ = small_image
    image_id = str(client.images.get(f"{NAME}:{TAGS[1]}").id)
    push = ("push", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--force")
    with registry(tmp_path) as host, flaky_proxy(host, seed=33) as proxy:
        via = proxy_host(proxy)
        proxy.allow(failures=1000, odds=1)  # every request fails: more than the retries outlast
        failed = imgbuild(*push, "--registry", f"{via}/ml", timeout=900)
        assert failed.returncode == 1 and "push failed (after 4 attempts)" in failed.stderr, failed.stderr[-3000:]
        assert "already published" not in failed.stderr
        assert all(registry_client.digest(f"{host}/ml/{NAME}:{tag}") is None for tag in TAGS), "no tag at all"
        proxy.allow(failures=3, odds=3)
        before = len(proxy.failed)
        pushed = imgbuild(*push, "--registry", f"{via}/ml", timeout=900)
        assert pushed.returncode == 0, pushed.stderr[-3000:]
        assert len(proxy.failed) == before + 3 and re.search(r"attempt 1/4 failed: .*50[234].*; retrying in 1s",
                                                    pushed.stderr), (proxy.failed, pushed.stderr[-3000:])
        [manifest] = set(re.findall(r"@(sha256:[0-9a-f]{64})$", pushed.stdout, flags=re.M))
        served = {registry_client.digest(f"{host}/ml/{NAME}:{tag}") for tag in TAGS}
        assert served == {manifest}, "every tag, read from the registry itself, names the one manifest"
        client.images.remove(image_id, force=True)
        proxy.allow(failures=3, odds=2)
        result = imgbuild("build", "--matrix", str(matrix), "--variant", SMALL_VARIANT, "--registry", f"{via}/ml",
                          "--json", str(tmp_path / "pulled.json"), "--log-dir", str(tmp_path / "logs"), timeout=900)
        assert result.returncode == 0, result.stderr[-3000:]
        assert json.loads((tmp_path / "pulled.json").read_text())[0]["status"] == "pulled", \
            (proxy.failed, result.stdout[-3000:])
        assert len(proxy.failed) > before + 3, "the lookup and the pull were failed too"
        assert str(client.images.get(f"{NAME}:{TAGS[1]}").id) == image_id
