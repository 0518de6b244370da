"""Repository-wide test settings: offline, headless, and the Triton interpreter where no GPU exists.

TRITON_INTERPRET must be set before Triton is first imported, so it is decided here, without
importing torch: on a machine with no NVIDIA device the real Triton kernels run on CPU (the
``interpret`` lane); on a GPU machine they run natively (the ``gpu`` lane).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
if not os.path.exists("/dev/nvidiactl"):
    os.environ.setdefault("TRITON_INTERPRET", "1")
