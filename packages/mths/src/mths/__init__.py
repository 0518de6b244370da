"""MTHS: Multi-Task Hierarchical Search for automated heuristic design."""

__all__ = ["__version__"]


def __getattr__(name: str):
    # lazy: importlib.metadata costs ~60 ms, paid by every sandbox worker that imports mths.components
    if name == "__version__":
        from importlib.metadata import version

        return version("mths")
    raise AttributeError(f"module 'mths' has no attribute {name!r}")
