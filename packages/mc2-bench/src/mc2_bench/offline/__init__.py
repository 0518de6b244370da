"""The CPU reproduction's offline pieces: the toy VLMs (``toy``, ``ToyAdapter``), the tiny
random-init Hugging Face checkpoints (``tiny``), the smol-vlm builder and experiment, digits
conflict sets (``digits``) and the reproduction itself (``experiments``).

The benchmark (``protocol``, ``steering``, ``hf``, ``io``, ``direction`` and the ``eval`` /
``steer`` / ``probe`` / ``report`` / ``build`` commands) imports nothing from here; ``toy``,
``smol-vlm``, ``digits-items``, ``reproduce`` and a toy model folder load it lazily.
"""
