# imgbuild's system-wide Jupyter Server policy (root-owned): token authentication is never switched off.
import os

c = get_config()  # type: ignore[name-defined]  # noqa: F821  (injected by traitlets)

if os.environ.get("JUPYTER_TOKEN") == "":
    raise SystemExit("jupyter_server_config: JUPYTER_TOKEN is empty, which would disable authentication")
c.ServerApp.allow_remote_access = True  # it listens inside the container; publish it on 127.0.0.1
c.ServerApp.root_dir = "/workspace"
c.ServerApp.open_browser = False
