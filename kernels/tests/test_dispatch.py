import pytest
import torch

from icml26_kernels import backend_for


def test_cpu_tensor_uses_reference_by_default(monkeypatch):
    monkeypatch.delenv("ICML26_KERNELS", raising=False)
    assert backend_for(torch.zeros(1)) == "reference"


def test_forced_reference(monkeypatch):
    monkeypatch.setenv("ICML26_KERNELS", "reference")
    assert backend_for(torch.zeros(1)) == "reference"


def test_forced_triton_on_cpu_without_interpreter_raises(monkeypatch):
    monkeypatch.setenv("ICML26_KERNELS", "triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
        backend_for(torch.zeros(1))


def test_forced_triton_with_interpreter(monkeypatch):
    monkeypatch.setenv("ICML26_KERNELS", "triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert backend_for(torch.zeros(1)) == "triton"


def test_unknown_backend_raises(monkeypatch):
    monkeypatch.setenv("ICML26_KERNELS", "cuda-magic")
    with pytest.raises(ValueError, match="ICML26_KERNELS"):
        backend_for(torch.zeros(1))
