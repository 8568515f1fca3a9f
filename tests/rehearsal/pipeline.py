"""`make pipeline`: images.yml and variant.yml replayed here, in their jobs' order, against two local
docker-registry instances (staging and public), on small images built from the project's templates: two runtime
images and a jupyter image on the first. Three runs, then the claims checked on what the registries hold:

1. a pull request of this repository: it builds, stages and tests, into `staging-untrusted` only;
2. main, after someone wrote the pull request's image into main's own staging (a same-repository pull request
   can): main refuses that unsigned hit and builds; one runtime image's test fails (injected), and the others
   are promoted all the same, each public tag serving exactly the digest its GPU job tested;
3. main again, nothing changed: the images published in 2 are promoted with neither a build nor a pull nor a
   test; the one whose test failed is reused from staging (signed by main in 2), tested, and promoted.

The GPU job's smoke step is the one `run:` step stood in for: this machine has no GPU, and the small images
hold no torch (the real suite runs on the real image in `make test`). Its stand-in checks that the pulled image
is the staged digest of that variant, and fails where a failure is injected."""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors

from builder.registry import skopeo as reg

from ..conftest import ROOT, imgbuild
from ..helpers import registry, small_project
from .runner import Event, Rehearsal, StepContext, StepRecord, copy_tree
from .standins import STANDINS

NAME = "imgbuild-test-pipeline"
RUNTIME, OTHER, CHILD = "2.7.1-cu126-debian12-runtime", "2.7.0-cu126-debian12-runtime", "2.7.1-cu126-debian12-jupyter"
VARIANTS = (RUNTIME, OTHER, CHILD)
SMOKE_STEP = "Smoke tests on the GPU"


@dataclass(frozen=True)
class Claim:
    text: str
    holds: bool
    detail: str = ""


@dataclass
class Outcome:
    runs: list[Rehearsal]
    seconds: list[float]
    staging: str  # HOST:PORT
    public: str
    tested: dict[tuple[int, str], str]  # (run, variant) -> the digest its GPU job tested
    pr_staging: list[str]  # the registries' repositories after the pull request's run
    pr_public: list[str]


def prepare(directory: Path) -> Path:
    """The rehearsal's repository: this working tree, with its own image name and small locks for VARIANTS only
    (so the matrix schedules just those), rendered."""
    repo = directory / "repo"
    repo.mkdir()
    copy_tree(ROOT, repo)
    (repo / ".venv").symlink_to((ROOT / ".venv").resolve())
    for lock in (repo / "locks").iterdir():
        lock.unlink()
    scratch = directory / "project"
    scratch.mkdir()
    small_project(scratch, NAME, variants=VARIANTS)
    shutil.copy2(scratch / "matrix.yaml", repo / "matrix.yaml")
    for variant in VARIANTS:
        shutil.copy2(scratch / "locks" / f"{variant}.txt", repo / "locks" / f"{variant}.txt")
    result = imgbuild("render", "--all", "--matrix", str(repo / "matrix.yaml"), cwd=repo)
    assert result.returncode == 0, result.stderr
    return repo


def smoke_standin(injected: frozenset[str]) -> object:
    def hook(step: StepContext) -> tuple[bool, str]:
        ref, variant = step.env["REF"], step.env["VARIANT"]
        image = docker.from_env().images.get(ref)
        said = (image.attrs["Config"].get("Labels") or {}).get("io.imgbuild.variant")
        (step.workspace / "smoke-report.json").write_text(json.dumps({"image": ref, "stand-in": True}) + "\n")
        if said != variant:
            return False, f"GPU smoke step: {ref} says it is {said}, not {variant}"
        if variant in injected:
            return False, f"GPU smoke step: failure injected into {variant}"
        return True, f"GPU smoke step (no GPU or torch here): {ref} is the staged {variant}"
    return hook


def catalog(host: str) -> list[str]:
    with urllib.request.urlopen(f"http://{host}/v2/_catalog", timeout=10) as r:
        return list(json.load(r)["repositories"] or [])


def tags(host: str, repository: str) -> list[str]:
    try:
        with urllib.request.urlopen(f"http://{host}/v2/{repository}/tags/list", timeout=10) as r:
            return list(json.load(r)["tags"] or [])
    except urllib.error.HTTPError:
        return []


def _tested(run: Rehearsal, variant: str) -> str | None:
    path = run.artifacts / f"tested-{variant}" / "tested.json"
    return str(json.loads(path.read_text())["digest"]) if path.is_file() else None


def _rehearse(repo: Path, root: Path, run_id: int, event: Event, staging: str, public: str,
              injected: frozenset[str] = frozenset()) -> tuple[Rehearsal, float]:
    variables = {"STAGING_REGISTRY": f"{staging}/imgbuild", "PUBLIC_REGISTRY": f"{public}/imgbuild"}
    run = Rehearsal(repo, root, event, variables, STANDINS, {SMOKE_STEP: smoke_standin(injected)},  # type: ignore[dict-item]
                    run_id=run_id)
    start = time.monotonic()
    run.run("images.yml")
    return run, time.monotonic() - start


def rehearse(directory: Path) -> tuple[Outcome, list[Claim]]:
    """The three runs, and the claims checked while the registries still serve."""
    repo = prepare(directory)
    (directory / "staging").mkdir()
    (directory / "public").mkdir()
    with ExitStack() as stack:
        staging = stack.enter_context(registry(directory / "staging"))
        public = stack.enter_context(registry(directory / "public"))
        root = directory / "runs"
        pr = Event("pull_request", "refs/pull/7/merge", "imgbuild/imgbuild")
        main = Event("push", "refs/heads/main")
        runs, seconds = [], []
        run, took = _rehearse(repo, root, 1, pr, staging, public)
        runs.append(run)
        seconds.append(took)
        pr_staging, pr_public = catalog(staging), catalog(public)
        # A same-repository pull request can push anywhere its token reaches: say, main's staging.
        planted = json.loads((run.artifacts / f"staged-{RUNTIME}" / "staged.json").read_text())[0]
        hash_tag = next(t for t in planted["tags"] if t.rsplit(":", 1)[1].startswith("build-"))
        reg.copy(f"{hash_tag.rsplit(':', 1)[0]}@{planted['digest']}",
                 hash_tag.replace("/staging-untrusted/", "/staging/"))
        for run_id, injected in ((2, frozenset({OTHER})), (3, frozenset())):
            run, took = _rehearse(repo, root, run_id, main, staging, public, injected)
            runs.append(run)
            seconds.append(took)
        tested = {(i + 1, v): d for i, r in enumerate(runs) for v in VARIANTS if (d := _tested(r, v))}
        out = Outcome(runs, seconds, staging, public, tested, pr_staging, pr_public)
        return out, claims(out)


NONE = StepRecord("", "", "", "", "absent")
BUILD_STEP = "Build (a child image on its runtime image's staged digest)"
REUSE_STEP = "Reuse the staged image only when it is provably this workflow's"
CHECK_STEP = "Check that every public tag serves the tested digest"


def _steps(run: Rehearsal, variant: str, job: str) -> dict[str, StepRecord]:
    return {r.step: r for r in run.records if r.matrix == variant and r.job == job}


def _status(run: Rehearsal, variant: str, job: str, step: str) -> str:
    return _steps(run, variant, job).get(step, NONE).status


def claims(out: Outcome) -> list[Claim]:
    pr, bad, again = out.runs
    repo = f"imgbuild/{NAME}"
    public_tags = tags(out.public, repo)
    found = [Claim("run 1, a pull request: it staged into staging-untrusted only, and published nothing",
                   bool(out.pr_staging) and all("/staging-untrusted/" in r for r in out.pr_staging)
                   and not out.pr_public and all(_status(pr, v, "publish", "(job)") == "skipped" for v in VARIANTS)
                   and all(_status(pr, v, "build", BUILD_STEP) == "ran" for v in VARIANTS),
                   f"staging: {out.pr_staging}, public: {out.pr_public}")]
    refused = _steps(bad, RUNTIME, "build").get(REUSE_STEP, NONE)
    found.append(Claim("run 2, main: the pull request's image planted in main's staging was refused (unsigned); "
                       "main built its own", "is not signed by" in refused.note
                       and _status(bad, RUNTIME, "build", BUILD_STEP) == "ran", refused.note[-300:]))
    for variant in (RUNTIME, CHILD):
        want = out.tested.get((2, variant))
        served = {t: reg.digest(f"{out.public}/{repo}:{t}") for t in public_tags if variant_tag(out, variant, t)}
        found.append(Claim(f"run 2: {variant}: every public tag serves the digest its GPU job tested ({want})",
                           bool(want and served and set(served.values()) == {want}), str(served)))
    found.append(Claim("no build-<hash> tag is public", not any(t.startswith("build-") for t in public_tags),
                       str(public_tags)))
    found.append(Claim(f"run 2: the failure injected into {OTHER}'s test kept it, and only it, from publication",
                       _status(bad, OTHER, "publish", "(job)") == "skipped" and (2, OTHER) not in out.tested
                       and _status(bad, RUNTIME, "publish", CHECK_STEP) == "ran"
                       and _status(bad, CHILD, "publish", CHECK_STEP) == "ran", ""))
    child_build = _steps(bad, CHILD, "build").get(BUILD_STEP, NONE)
    found.append(Claim(f"run 2: {CHILD} was built on its runtime image's staged digest, pulled by digest",
                       child_build.status == "ran" and f": on {out.staging}/imgbuild/staging/" in child_build.note
                       and "@sha256:" in child_build.note, child_build.note[-300:]))
    for variant in (RUNTIME, CHILD):
        found.append(Claim(f"run 3, main unchanged: {variant} promoted with no build, no pull and no test",
                           _status(again, variant, "build", BUILD_STEP) == "skipped"
                           and _status(again, variant, "test", "(job)") == "skipped"
                           and _status(again, variant, "publish", CHECK_STEP) == "ran",
                           str({k: r.status for k, r in _steps(again, variant, "build").items()})))
    found.append(Claim(f"run 3: {OTHER} reused from main's staging (signed in run 2), tested, and promoted",
                       _status(again, OTHER, "build", BUILD_STEP) == "skipped" and (3, OTHER) in out.tested
                       and _status(again, OTHER, "publish", CHECK_STEP) == "ran"
                       and any(variant_tag(out, OTHER, t) for t in public_tags), ""))
    return found


def variant_tag(out: Outcome, variant: str, tag: str) -> bool:
    result = imgbuild("matrix", "--variant", variant, "--json", "--matrix", str(out.runs[0].repository / "matrix.yaml"))
    data = json.loads(result.stdout)[0]
    return tag in (*data["tags"], *data["aliases"])


def image_ids() -> set[str]:
    return {str(i.id) for i in docker.from_env().images.list(all=True)}


def remove_images(before: set[str]) -> int:
    """What the rehearsal made: images that were not here before it, untagged (the classic builder's
    intermediate images) or tagged with its name only. Leaves first: an image with a child waits a pass."""
    client = docker.from_env()
    gone = 0
    while True:
        ours = [str(i.id) for i in client.images.list(all=True)
                if i.id not in before and all(NAME in t for t in i.tags)]
        done = gone
        for image_id in ours:
            try:
                client.images.remove(image_id, force=True)
                gone += 1
            except docker.errors.APIError as exc:
                if exc.status_code not in (404, 409):
                    raise
        if not ours or gone == done:
            return gone


@contextmanager
def scratch() -> Iterator[Path]:
    before = image_ids()
    with tempfile.TemporaryDirectory(prefix="imgbuild-pipeline-") as tmp:
        try:
            yield Path(tmp)
        finally:
            remove_images(before)


def main() -> int:
    with scratch() as directory:
        out, found = rehearse(directory)
    for i, took in enumerate(out.seconds, 1):
        print(f"run {i}: {took:.0f} s")
    for c in found:
        print(f"{'HOLDS' if c.holds else 'FAILS'}  {c.text}" + ("" if c.holds else f": {c.detail}"))
    return 0 if all(c.holds for c in found) else 1


if __name__ == "__main__":
    sys.exit(main())
