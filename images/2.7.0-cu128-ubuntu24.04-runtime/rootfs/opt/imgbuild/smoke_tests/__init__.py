"""The smoke payload: runs inside each image, and outside Docker with any Python that has torch.

Imports only torch and the standard library.
"""
