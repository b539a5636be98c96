"""pytest fixtures for kernel tests against the oracle (registered as the `dsv4_oracle` plugin when
the package is installed; in a conftest: pytest_plugins = ["dsv4_oracle.pytest_plugin"]).

Fixtures: dsv4_seed, dsv4_rng, dsv4_config (indirect-parametrizable: 'tiny' | 'flash' | 'pro'),
dsv4_policy, dsv4_rerun (the N-rerun bitwise gate), dsv4_cuda (a torch CUDA device, or skip).
Marker: @pytest.mark.gpu skips the test without a CUDA device.
Options: --dsv4-seed N, --dsv4-reruns N (default 20), --dsv4-config NAME (default tiny).
"""
import functools

import numpy as np
import pytest

from . import _core, testing


def pytest_addoption(parser):
    group = parser.getgroup("dsv4_oracle")
    group.addoption("--dsv4-seed", type=int, default=0, help="seed of dsv4_rng (default 0)")
    group.addoption("--dsv4-reruns", type=int, default=20, help="runs of the dsv4_rerun bitwise gate (default 20)")
    group.addoption("--dsv4-config", default="tiny", choices=testing.CONFIG_NAMES, help="default dsv4_config")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA device; skipped without one")


def cuda_available():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


def pytest_runtest_setup(item):
    if item.get_closest_marker("gpu") is not None and not cuda_available():
        pytest.skip("no CUDA device (torch with CUDA not importable or no GPU)")


@pytest.fixture
def dsv4_seed(request):
    return request.config.getoption("--dsv4-seed")


@pytest.fixture
def dsv4_rng(dsv4_seed):
    return np.random.default_rng(dsv4_seed)


@pytest.fixture
def dsv4_config(request):
    return _core.ModelConfig(getattr(request, "param", None) or request.config.getoption("--dsv4-config"))


@pytest.fixture
def dsv4_policy(request):
    return _core.PrecisionPolicy(getattr(request, "param", "official"))


@pytest.fixture
def dsv4_rerun(request):
    """dsv4_rerun(fn) calls fn() --dsv4-reruns times and asserts every result bitwise equal to the first."""
    return functools.partial(testing.assert_bitwise_rerun, n=request.config.getoption("--dsv4-reruns"))


@pytest.fixture
def dsv4_cuda():
    if not cuda_available():
        pytest.skip("no CUDA device")
    import torch

    return torch.device("cuda")
