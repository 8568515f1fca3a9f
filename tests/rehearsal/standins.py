"""Local stand-ins for the steps that are GitHub's (or Sigstore's) own, each saying what it stands in for:
checkout, registry login, artifacts, the disk clean-up, cosign keyless signing, the SBOM action and
attestations. Everything else a workflow does runs for real."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

from .runner import StepContext, StepHook

ISSUER = "https://token.actions.githubusercontent.com"

# Sigstore stands in as a file of (digest -> identities) beside the runs: `cosign sign` records the job's
# OIDC identity (granted only with `id-token: write`, as GitHub mints it), `cosign verify` checks it by digest.
_COSIGN = '''#!{python}
import json, os, pathlib, sys
store = pathlib.Path(os.environ["REHEARSAL_SIGSTORE"])
data = json.loads(store.read_text()) if store.is_file() else {{}}
args = sys.argv[1:]
ref = args[-1]
if "@sha256:" not in ref:
    sys.exit(f"cosign (stand-in): {{ref}}: sign and verify by digest only")
digest = ref.split("@", 1)[1]
if args[0] in ("sign", "attest"):
    who = os.environ.get("REHEARSAL_ID_TOKEN")
    if not who:
        sys.exit("cosign (stand-in): no OIDC token: the job lacks permissions id-token: write")
    kind = "signatures" if args[0] == "sign" else "attestations"
    data.setdefault(kind, {{}}).setdefault(digest, []).append(who)
    store.write_text(json.dumps(data))
    print(f"cosign (stand-in): {{args[0]}} {{ref}} as {{who}}")
elif args[0] == "verify":
    want = args[args.index("--certificate-identity") + 1]
    issuer = args[args.index("--certificate-oidc-issuer") + 1]
    if issuer != "{issuer}" or want not in data.get("signatures", {{}}).get(digest, []):
        sys.exit(f"cosign (stand-in): no signature of {{want}} on {{ref}}")
    print(f"cosign (stand-in): {{ref}} signed by {{want}}")
else:
    sys.exit(f"cosign (stand-in): {{args[0]}} is not stood in for")
'''


def checkout(step: StepContext) -> tuple[bool, str]:
    shutil.copytree(step.rehearsal.repository, step.workspace, symlinks=True, dirs_exist_ok=True)
    venv = step.rehearsal.repository / ".venv"
    if not (step.workspace / ".venv").exists():
        (step.workspace / ".venv").symlink_to(venv.resolve())
    return True, "actions/checkout: a copy of the rehearsal's repository, with this checkout's .venv linked in"


def login(step: StepContext) -> tuple[bool, str]:
    return True, "docker/login-action: nothing to do, the local registries take no credentials"


def free_disk(step: StepContext) -> tuple[bool, str]:
    return True, "jlumbroso/free-disk-space: nothing removed on this machine"


def cosign_installer(step: StepContext) -> tuple[bool, str]:
    shim = step.bin_dir / "cosign"
    shim.write_text(_COSIGN.format(python=sys.executable, issuer=ISSUER))
    shim.chmod(0o755)
    return True, "sigstore/cosign-installer: a cosign stand-in (Sigstore keyless signing cannot run here)"


def _artifact_dir(step: StepContext, name: str) -> Path:
    return step.rehearsal.artifacts / name


def upload(step: StepContext) -> tuple[bool, str]:
    target = _artifact_dir(step, str(step.with_["name"]))
    paths = [p.strip() for p in str(step.with_["path"]).splitlines() if p.strip()]
    found = [p for p in paths if (step.workspace / p).is_file()]
    if found:
        target.mkdir(parents=True, exist_ok=True)
        for p in found:
            shutil.copy2(step.workspace / p, target / Path(p).name)
    listed = ", ".join(found) or "no files: a warning on GitHub"
    return True, f"actions/upload-artifact: {step.with_['name']} ({listed})"


def download(step: StepContext) -> tuple[bool, str]:
    name = str(step.with_["name"])
    source = _artifact_dir(step, name)
    if not source.is_dir():
        return False, f"actions/download-artifact: Artifact not found for name: {name}"
    target = step.workspace / str(step.with_.get("path") or ".")
    shutil.copytree(source, target, dirs_exist_ok=True)
    return True, f"actions/download-artifact: {name} into {target.relative_to(step.workspace)}"


def sbom(step: StepContext) -> tuple[bool, str]:
    out = step.workspace / str(step.with_.get("output-file") or "sbom.spdx.json")
    out.write_text(json.dumps({"spdxVersion": "SPDX-2.3", "name": str(step.with_["image"]), "packages": []}))
    return True, f"anchore/sbom-action: an empty SPDX document for {step.with_['image']}"


def attest(step: StepContext) -> tuple[bool, str]:
    if not step.id_token:
        return False, "actions/attest: no OIDC token (the job lacks id-token: write)"
    store = Path(step.env["REHEARSAL_SIGSTORE"])
    data = json.loads(store.read_text()) if store.is_file() else {}
    data.setdefault("attestations", {}).setdefault(str(step.with_["subject-digest"]), []).append(
        str(step.with_["predicate-type"]))
    store.write_text(json.dumps(data))
    return True, f"actions/attest: {step.with_['predicate-type']} recorded for {step.with_['subject-digest'][:19]}"


STANDINS: dict[str, StepHook] = {
    "actions/checkout": checkout, "docker/login-action": login, "jlumbroso/free-disk-space": free_disk,
    "sigstore/cosign-installer": cosign_installer, "actions/upload-artifact": upload,
    "actions/download-artifact": download, "anchore/sbom-action": sbom, "actions/attest": attest,
}
