"""pytest-testinfra checks of a built image, run by `imgbuild test` against a container of it."""
