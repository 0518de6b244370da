"""Your own pieces without editing this package.

Three documented callables register them in-process:

- ``dd_multiindex.core.register_activation(name, fn, grad, eta_unit=None)``: the learner's σ, its
  derivative, and the unit of the stage-1 step (``TwoStageLearner(..., activation=name)``,
  ``sweep --activation name``);
- ``dd_multiindex.distill.register_distiller(name)``: a distiller ``fn(learner, X, y, m1, cfg, seed,
  **kw) -> (x̃, ỹ)`` (``sweep/distill --distiller name``);
- ``dd_multiindex.baselines.register_baseline(name)``: an equal-memory subset rule.

For the command line (and the sweep's worker processes) put the calls in a function and name it under
the entry-point group ``dd_multiindex.plugins`` in your package's ``pyproject.toml``::

    [project.entry-points."dd_multiindex.plugins"]
    mine = "my_pkg.dd:register"      # def register() -> None: register_activation("tanh", ...)

``load_plugins()`` calls each such function once per process, before the CLI parses its arguments.
"""

from __future__ import annotations

from importlib.metadata import entry_points

from icml26_shared import UserError

GROUP = "dd_multiindex.plugins"
_LOADED: list[str] = []


def load_plugins() -> list[str]:
    """Call every ``dd_multiindex.plugins`` entry point once per process; returns their names. A
    plugin that fails to load or to register raises ``UserError`` naming it (one line)."""
    for ep in entry_points(group=GROUP):
        if ep.name in _LOADED:
            continue
        try:
            ep.load()()
        except Exception as exc:  # a user's plugin: report which one, in one line
            raise UserError(f"plugin {ep.name!r} ({ep.value}) failed: {type(exc).__name__}: {exc}") from None
        _LOADED.append(ep.name)
    return list(_LOADED)
