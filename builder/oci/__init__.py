"""Image bytes that imgbuild alone decides: layer tars and their digests. Pure: the standard library only, no
Docker SDK, no subprocess, no network (tests/test_layout.py keeps it so). The engine and registry adapters
feed it bytes and take bytes from it."""
