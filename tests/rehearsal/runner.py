"""Replay a GitHub Actions workflow on this machine, read from its file: the jobs in their `needs` order, their
`if:` conditions, strategy matrices, reusable-workflow calls with their inputs, job and step outputs, and every
`run:` step as GitHub runs it (`bash -e`, with GITHUB_OUTPUT, GITHUB_STEP_SUMMARY and GITHUB_ENV). Only the
steps that are GitHub's own actions are stood in for (standins.py), and each stand-in is named in the output.
Every job gets a fresh workspace (a copy of the repository); all share this host's Docker engine."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .expressions import condition, interpolate, to_string

StepHook = Callable[["StepContext"], tuple[bool, str]]


@dataclass(frozen=True)
class Event:
    name: str  # push | pull_request | workflow_dispatch
    ref: str  # refs/heads/main, refs/pull/7/merge, ...
    head_repository: str | None = None  # a pull request's head repository


@dataclass(frozen=True)
class StepRecord:
    workflow: str
    job: str
    matrix: str
    step: str
    status: str  # ran | failed | skipped | stand-in | stand-in failed
    note: str = ""


@dataclass
class StepContext:
    """What a stand-in sees of its step: its `with:` inputs, the step's environment and the job's workspace."""
    rehearsal: Rehearsal
    workspace: Path
    env: dict[str, str]
    with_: dict[str, Any]
    bin_dir: Path
    id_token: str | None  # the OIDC identity the job may sign as, when its permissions grant id-token: write


@dataclass
class JobResult:
    result: str  # success | failure | skipped
    outputs: dict[str, str] = field(default_factory=dict)


def _on(data: dict[Any, Any]) -> dict[str, Any]:
    on = data.get("on", data.get(True))  # YAML 1.1 reads a bare `on` key as true
    return on if isinstance(on, dict) else {}


def _matrix(spec: Any) -> list[dict[str, Any]]:
    if spec is None:
        return [{}]
    if not isinstance(spec, dict):
        raise ValueError(f"strategy.matrix is {spec!r}")
    axes = {k: v for k, v in spec.items() if k not in ("include", "exclude")}
    combos = [dict(zip(axes, values, strict=True)) for values in itertools.product(*axes.values())] if axes else []
    combos += list(spec.get("include") or [])
    return combos


class Rehearsal:
    def __init__(self, repository: Path, root: Path, event: Event, variables: dict[str, str],
                 standins: dict[str, StepHook], replaced: dict[str, StepHook] | None = None,
                 github_repository: str = "imgbuild/imgbuild", run_id: int = 1) -> None:
        self.repository, self.root, self.event = repository, root, event
        self.variables, self.standins, self.replaced = variables, standins, replaced or {}
        self.github_repository, self.run_id = github_repository, run_id
        self.records: list[StepRecord] = []
        self.summaries: list[str] = []
        self.artifacts = root / f"run-{run_id}" / "artifacts"
        self.artifacts.mkdir(parents=True, exist_ok=True)
        self._workspaces = itertools.count()

    def say(self, text: str) -> None:
        print(f"[run {self.run_id} {self.event.name} {self.event.ref}] {text}", flush=True)

    def github(self, workflow: str) -> dict[str, Any]:
        owner = self.github_repository.split("/")[0]
        event: dict[str, Any] = {}
        if self.event.name == "pull_request":
            event = {"pull_request": {"head": {"repo": {"full_name": self.event.head_repository}}}}
        return {"event_name": self.event.name, "ref": self.event.ref, "repository": self.github_repository,
                "repository_owner": owner, "actor": "rehearsal", "run_id": str(self.run_id), "event": event,
                "workflow_ref": f"{self.github_repository}/.github/workflows/{workflow}@{self.event.ref}"}

    def identity(self, workflow: str) -> str:
        return f"https://github.com/{self.github_repository}/.github/workflows/{workflow}@{self.event.ref}"

    # ---- workflows and jobs ------------------------------------------------------------------------------
    def run(self, workflow: str = "images.yml", inputs: dict[str, Any] | None = None,
            label: str = "") -> dict[str, JobResult]:
        """Every job of `workflow`; `label`: the calling job's matrix entry, for a reusable workflow's records."""
        path = self.repository / ".github" / "workflows" / workflow
        data = yaml.safe_load(path.read_text())
        spec = (_on(data).get("workflow_call") or {}).get("inputs") or {}
        given = dict(inputs or {})
        resolved = {name: given.get(name, s.get("default", False if s.get("type") == "boolean" else ""))
                    for name, s in spec.items()}
        base = {"github": self.github(workflow), "vars": self.variables, "inputs": resolved,
                "secrets": {"GITHUB_TOKEN": "rehearsal-token"}}
        env = {k: to_string(interpolate(v, base)) for k, v in (data.get("env") or {}).items()}
        jobs: dict[str, dict[str, Any]] = data["jobs"]
        results: dict[str, JobResult] = {}
        while len(results) < len(jobs):
            ready = [j for j in jobs if j not in results and all(n in results for n in self._needs(jobs[j]))]
            if not ready:
                raise ValueError(f"{workflow}: a cycle in needs")
            for job_id in ready:
                results[job_id] = self._job(workflow, data, job_id, jobs[job_id], base, env, results, label)
        return results

    @staticmethod
    def _needs(job: dict[str, Any]) -> list[str]:
        needs = job.get("needs") or []
        return [needs] if isinstance(needs, str) else list(needs)

    def _job(self, workflow: str, data: dict[str, Any], job_id: str, job: dict[str, Any], base: dict[str, Any],
             env: dict[str, str], results: dict[str, JobResult], caller: str) -> JobResult:
        needs = {n: {"result": results[n].result, "outputs": results[n].outputs} for n in self._needs(job)}
        status = {"success": all(r["result"] == "success" for r in needs.values()), "always": True,
                  "failure": any(r["result"] == "failure" for r in needs.values()), "cancelled": False}
        contexts = {**base, "needs": needs, "env": env}
        if not condition(job.get("if"), contexts, status):
            self.records.append(StepRecord(workflow, job_id, caller, "(job)", "skipped"))
            self.say(f"{workflow} {job_id} [{caller}]: skipped (if: {job.get('if', 'success()')})")
            return JobResult("skipped")
        combos = _matrix(interpolate((job.get("strategy") or {}).get("matrix"), contexts))
        if not combos:
            self.say(f"{workflow} {job_id}: failure (an empty matrix: GitHub refuses the job)")
            return JobResult("failure")
        instances = []
        for combo in combos:
            label = str(combo.get("variant", ",".join(map(str, combo.values())))) if combo else caller
            ctx = {**contexts, "matrix": combo, "strategy": {}}
            if "uses" in job:
                called = str(job["uses"]).removeprefix("./.github/workflows/")
                with_ = interpolate(job.get("with") or {}, ctx)
                self.say(f"{workflow} {job_id} [{label}]: calls {called}")
                inner = self.run(called, with_, label)
                failed = any(r.result == "failure" for r in inner.values())
                instances.append(JobResult("failure" if failed else "success"))
            else:
                instances.append(self._steps(workflow, data, job_id, job, ctx, env, label))
        result = "failure" if any(i.result == "failure" for i in instances) else "success"
        return JobResult(result, instances[-1].outputs)  # matrix outputs: the last instance's, as on GitHub

    def _permissions(self, data: dict[str, Any], job: dict[str, Any]) -> dict[str, str]:
        perms = job.get("permissions", data.get("permissions")) or {}
        return perms if isinstance(perms, dict) else {}

    def _steps(self, workflow: str, data: dict[str, Any], job_id: str, job: dict[str, Any], ctx: dict[str, Any],
               workflow_env: dict[str, str], label: str) -> JobResult:
        workspace = self.root / f"run-{self.run_id}" / f"ws-{next(self._workspaces)}-{job_id}"
        workspace.mkdir(parents=True)
        bin_dir = workspace.parent / f"{workspace.name}-bin"
        bin_dir.mkdir()
        env = {**workflow_env, **{k: to_string(interpolate(v, ctx)) for k, v in (job.get("env") or {}).items()}}
        id_token = self.identity(workflow) if self._permissions(data, job).get("id-token") == "write" else None
        steps: dict[str, Any] = {}
        failed = False
        summary = workspace.parent / f"{workspace.name}-summary.md"
        for index, step in enumerate(job.get("steps") or []):
            name = str(step.get("name") or step.get("uses") or str(step.get("run", "")).splitlines()[0])
            sctx = {**ctx, "env": env, "steps": steps}
            status = {"success": not failed, "always": True, "failure": failed, "cancelled": False}
            if not condition(step.get("if"), sctx, status):
                self.records.append(StepRecord(workflow, job_id, label, name, "skipped"))
                continue
            step_env = {**env, **{k: to_string(interpolate(v, sctx)) for k, v in (step.get("env") or {}).items()}}
            outputs_file = workspace.parent / f"{workspace.name}-out-{index}"
            env_file = workspace.parent / f"{workspace.name}-env-{index}"
            outputs_file.touch()
            env_file.touch()
            runtime = {"GITHUB_OUTPUT": str(outputs_file), "GITHUB_ENV": str(env_file),
                       "GITHUB_STEP_SUMMARY": str(summary), "GITHUB_WORKSPACE": str(workspace),
                       "GITHUB_REPOSITORY": self.github_repository, "GITHUB_RUN_ID": str(self.run_id),
                       "GITHUB_REF": self.event.ref, "GITHUB_EVENT_NAME": self.event.name, "CI": "true",
                       "PATH": f"{bin_dir}:{os.environ['PATH']}",
                       # What the stand-ins of Sigstore and GitHub's OIDC tokens read (standins.py).
                       "REHEARSAL_SIGSTORE": str(self.root / "sigstore.json"),
                       **({"REHEARSAL_ID_TOKEN": id_token} if id_token else {})}
            hook = self.replaced.get(name)
            if hook is None and "uses" in step:
                action = str(step["uses"]).split("@")[0]
                hook = self.standins.get(action)
                if hook is None:
                    raise ValueError(f"{workflow} {job_id}: no stand-in for {action}")
            if hook is not None:
                ok, note = hook(StepContext(self, workspace, {**step_env, **runtime},
                                            interpolate(step.get("with") or {}, sctx), bin_dir, id_token))
                self.records.append(StepRecord(workflow, job_id, label, name, "stand-in" if ok else "stand-in failed",
                                               note))
                self.say(f"{workflow} {job_id} [{label}] {name}: stand-in{'' if ok else ' FAILED'}: {note}")
            else:
                script = to_string(interpolate(step["run"], sctx))
                self.say(f"{workflow} {job_id} [{label}] {name}: run")
                proc = subprocess.run(["bash", "-e", "-c", script], cwd=workspace,
                                      env={**os.environ, **step_env, **runtime}, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True, check=False)
                for line in proc.stdout.splitlines():
                    print(f"    {line}", flush=True)
                ok = proc.returncode == 0
                self.records.append(StepRecord(workflow, job_id, label, name, "ran" if ok else "failed",
                                               proc.stdout))
            steps[str(step.get("id", f"_{index}"))] = {"outputs": _pairs(outputs_file.read_text()),
                                                      "outcome": "success" if ok else "failure"}
            env.update(_pairs(env_file.read_text()))
            failed = failed or not ok
        if summary.is_file():
            self.summaries.append(summary.read_text())
        outputs = {k: to_string(interpolate(v, {**ctx, "env": env, "steps": steps}))
                   for k, v in (job.get("outputs") or {}).items()}
        self.say(f"{workflow} {job_id} [{label}]: {'failure' if failed else 'success'}")
        return JobResult("failure" if failed else "success", outputs)


def _pairs(text: str) -> dict[str, str]:
    """GITHUB_OUTPUT / GITHUB_ENV lines: NAME=VALUE, or NAME<<DELIMITER ... DELIMITER."""
    out: dict[str, str] = {}
    lines = iter(text.splitlines())
    for line in lines:
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            out[name] = "\n".join(itertools.takewhile(lambda x, d=delimiter: x != d, lines))
        elif "=" in line:
            name, value = line.split("=", 1)
            out[name] = value
    return out


def copy_tree(source: Path, target: Path) -> None:
    """The working tree as a checkout has it: tracked and untracked, not ignored files, times kept."""
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=source, check=True,
                            capture_output=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        src = source / name
        if src.is_file() or src.is_symlink():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target / name, follow_symlinks=False)


