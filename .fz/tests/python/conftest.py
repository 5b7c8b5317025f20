"""Markers: `gpu` needs a CUDA GPU, `dist` runs only under torchrun (one process per GPU).
Without them the tests are skipped with the reason printed (run pytest with -rs): a skip is
never a pass."""
import os

import pytest


def _gpu_count() -> int:
    try:
        import torch
    except ImportError:
        return 0
    try:
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    except RuntimeError:
        return 0


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU")
    config.addinivalue_line("markers", "dist: needs torchrun with one process per GPU")


def pytest_collection_modifyitems(config, items):
    gpus = _gpu_count()
    under_torchrun = "WORLD_SIZE" in os.environ and "LOCAL_RANK" in os.environ
    for item in items:
        if "gpu" in item.keywords and gpus == 0:
            item.add_marker(pytest.mark.skip(reason="no CUDA GPU on this machine"))
        elif "dist" in item.keywords and not under_torchrun:
            item.add_marker(pytest.mark.skip(
                reason="needs torchrun: torchrun --nproc-per-node N -m pytest tests/python/test_distributed.py"))
        elif "dist" in item.keywords and gpus < int(os.environ.get("WORLD_SIZE", "1")):
            item.add_marker(pytest.mark.skip(reason=f"needs one GPU per rank, this machine has {gpus}"))
