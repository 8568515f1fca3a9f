"""imgbuild: reproducible builds of GPU container images from a declared version matrix."""
