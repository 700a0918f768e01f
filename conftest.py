"""Test configuration for the unit tests and nbval: CPU, no network, synthetic data.

The notebook kernels nbval starts get the test configuration and no GPU
(``CUDA_VISIBLE_DEVICES=""`` in their environment only), so the outputs they
compare are the stored CPU ones on every machine; the unit tests in this
process still see the GPU, if there is one.
"""
import os

from execute_notebooks import TEST_ENV, kernel_env  # tools/, on pytest's pythonpath: one test configuration

os.environ.update(TEST_ENV)  # the unit tests and anything they start


def _kernels_without_gpu(start_new_kernel):
    def start(*args, **kwargs):
        kwargs["env"] = {**kwargs.get("env", os.environ), **kernel_env()}
        return start_new_kernel(*args, **kwargs)
    return start


def pytest_configure(config):
    """Give nbval's notebook kernels :func:`kernel_env` (nbval starts each one with nbval.kernel.start_new_kernel)."""
    try:
        from nbval import kernel
    except ImportError:  # no nbval (e.g. a bare GPU machine): no notebook kernels either
        return
    if not getattr(kernel.start_new_kernel, "gives_kernel_env", False):
        kernel.start_new_kernel = _kernels_without_gpu(kernel.start_new_kernel)
        kernel.start_new_kernel.gives_kernel_env = True
