"""A CEL results folder on disk: a lock, atomic writes, and stage files that prove their origin.

A run writes each stage's table as soon as it is done, so an interrupted run resumes where it
stopped. Resuming is only safe when every reused file was made by this run's inputs, so each
table is recorded in `config.json` under `files` with

- `sha256`: the hash of the file's bytes (a truncated, emptied or edited file is refused),
- `rows`: its number of rows,
- `inputs`: a hash of what made it (the config, which carries the model's and the tasks'
  fingerprints, and the records of the stage files it was computed from).

A stage that takes long also saves its finished part as it goes (`save_partial`): the
confirmation after each size's set, its random baselines and side effects, and after each
size of the trade-off table; the search its scoring calls (`save_partial_bytes`,
`workbench.search.replay`). That checkpoint, `<stage>.partial.json` (the search's
`search.partial.pt`, recorded with its `file` name), is recorded in `config.json` under
`partial` with its sha256 and the inputs of the stage's table, so a rerun takes it up only
when it was made by the same inputs (`load_partial`); it is deleted once the stage's tables
are saved, so a finished folder holds none.

`ResultStore` opens a folder for a run: it refuses a path that is a file or not writable, a
folder holding CEL tables without a `config.json`, and any recorded file that is missing or
changed, all before anything is written; and it holds the folder's lock for the whole run
(`workbench.results.lock`), so two runs cannot write into one folder at once. With
`overwrite=True` it empties an earlier CEL results folder only once it holds that lock, so
`--overwrite` never deletes the files of a run that is still writing them.

Folders written by older versions stay readable and resumable: their files keep the bytes
(and hashes) they were written with, and `upgrade_table` renames an old column to its
current name and scale when a table is read (`RENAMED`: `random_share_ge` and
`pool_share_ge`, shares in [0, 1], became `random_pct_ge` and `pool_pct_ge`, percents like
`percentile`; combos' `score` became `ablated_<objective>`).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd

from workbench.errors import WorkbenchError
from workbench.results.fingerprint import digest, file_digest
from workbench.results.lock import LOCK_FILE, acquire_lock, check_writable, release_lock
from workbench.tables import load_table, save_table

CONFIG_FILE = "config.json"
PARTIAL_SUFFIX = ".partial.json"  # a stage's checkpoint: `confirm.partial.json`
PARTIAL_MARK = ".partial."  # in every checkpoint's name (the search's: `search.partial.pt`)
TABLES = ("heads", "combos", "confirmation", "side_effects", "tradeoff")
# the stage files each table is computed from
UPSTREAM = {"heads": (), "combos": ("heads",), "confirmation": ("combos",),
            "side_effects": ("combos",), "tradeoff": ("combos",)}
# table -> (old column, new column, factor) of the columns older versions wrote; "{objective}"
# is the run's objective
RENAMED = {
    "confirmation": (("random_share_ge", "random_pct_ge", 100.0),
                     ("pool_share_ge", "pool_pct_ge", 100.0)),
    "combos": (("score", "ablated_{objective}", 1.0),),
}

def write_text(path: Path, text: str | bytes) -> Path:
    """Write text (or bytes) atomically (temporary file, then rename)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        if isinstance(text, bytes):
            tmp.write_bytes(text)
        else:
            tmp.write_text(text)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # only after a failure or an interrupt
    return path


def partial_name(stage: str, record: dict) -> str:
    """The file name of `stage`'s checkpoint as `config.json` records it (`file`; a JSON
    checkpoint, `<stage>.partial.json`, records none); a recorded name that is not a plain
    checkpoint name in the folder is not taken."""
    name = record.get("file")
    if isinstance(name, str) and Path(name).name == name and PARTIAL_MARK in name:
        return name
    return f"{stage}{PARTIAL_SUFFIX}"


def write_json(path: Path, obj) -> Path:
    """Write JSON atomically."""
    return write_text(path, json.dumps(obj, indent=1, sort_keys=True, default=_json_default))


def json_values(obj):
    """`obj` as the JSON values it is saved as (numpy numbers as Python's, tuples as lists;
    key order kept): what a reader of the saved file gets back, so that a result computed
    now and one read back from a checkpoint are built from the same values."""
    return json.loads(json.dumps(obj, default=_json_default))


def _json_default(obj):
    if hasattr(obj, "item"):
        return obj.item()
    if isinstance(obj, (set, tuple)):
        return list(obj)
    raise TypeError(f"cannot write {type(obj).__name__} to JSON")


def read_run_file(folder: str | Path) -> dict:
    """The parsed `config.json` of a results folder."""
    path = Path(folder) / CONFIG_FILE
    if not path.is_file():
        raise WorkbenchError(f"{str(folder)!r} is not a CEL results folder (no {CONFIG_FILE})")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WorkbenchError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(data, dict) or data.get("format") != "cel-result" or "config" not in data:
        raise WorkbenchError(f"{path} is not a CEL results config (format 'cel-result')")
    return data


def write_table(folder: Path, name: str, df: pd.DataFrame, inputs: str) -> dict:
    """Write `name.csv` atomically; return its record for `config.json`. Its `df.attrs` are
    not written: `config.json` records the run's settings and the file records."""
    bare = df.copy(deep=False)
    bare.attrs = {}
    path = save_table(bare, folder / f"{name}.csv")
    return {"sha256": file_digest(path), "rows": int(len(df)), "inputs": inputs}


def read_table(folder: Path, name: str, record: dict, inputs: str | None = None) -> pd.DataFrame:
    """Read a recorded table, refusing a file that is missing, changed or made from other
    inputs than `inputs` (when given)."""
    path = folder / f"{name}.csv"
    where = f"{str(folder)!r}"
    if not path.is_file():
        raise WorkbenchError(
            f"{where}: {CONFIG_FILE} records {path.name} but the file is missing; restore it "
            "or delete the folder and rerun"
        )
    if file_digest(path) != record.get("sha256"):
        raise WorkbenchError(
            f"{where}: {path.name} was changed, truncated or replaced after it was written "
            f"(its sha256 differs from the one in {CONFIG_FILE}); delete the folder and rerun"
        )
    if inputs is not None and record.get("inputs") != inputs:
        raise WorkbenchError(
            f"{where}: {path.name} was made from other inputs than this run's; delete the "
            "folder or use another one"
        )
    try:
        df = load_table(path)
    except (ValueError, OSError, pd.errors.ParserError) as e:
        raise WorkbenchError(f"{where}: {path.name} cannot be read: {e}") from None
    if len(df) != record.get("rows"):
        raise WorkbenchError(
            f"{where}: {path.name} has {len(df)} rows; {CONFIG_FILE} records {record.get('rows')}"
        )
    return df


def upgrade_table(name: str, df: pd.DataFrame, config: dict) -> pd.DataFrame:
    """`df` (stage table `name` of a run with `config`) with the columns of older versions
    renamed and rescaled to the current ones (`RENAMED`), in place of the old; a table of
    this version is returned unchanged."""
    renames = [(old, new.format(objective=config.get("objective")), factor)
               for old, new, factor in RENAMED.get(name, ()) if old in df]
    if not renames:
        return df
    df = df.copy()
    for old, _, factor in renames:
        df[old] = df[old] * factor
    return df.rename(columns={old: new for old, new, _ in renames})


def read_folder(folder: str | Path) -> tuple[dict, dict[str, pd.DataFrame]]:
    """`(run file, tables)` of a results folder: its parsed `config.json` and every stage
    table it records, checked (`read_table`) and upgraded to the current columns
    (`upgrade_table`); a stage not reached is an empty table. A CEL table on disk that
    `config.json` does not record is refused."""
    folder = Path(folder)
    data = read_run_file(folder)
    files = data.get("files", {})
    tables = {}
    for name in TABLES:
        if name in files:
            df = read_table(folder, name, files[name], stage_inputs(name, data["config"], files))
            tables[name] = upgrade_table(name, df, data["config"])
        elif (folder / f"{name}.csv").exists():
            raise WorkbenchError(
                f"{str(folder)!r}: {name}.csv is not recorded in {CONFIG_FILE} (written by "
                "another run or an older version)"
            )
        else:
            tables[name] = pd.DataFrame()
    return data, tables


def verify_folder(folder: str | Path) -> dict:
    """The parsed `config.json` of a results folder whose every recorded table is there with
    its recorded sha256 (else one `WorkbenchError` saying which was changed or is missing);
    reads nothing else. The command line checks a folder so before it loads a model."""
    folder = Path(folder)
    data = read_run_file(folder)
    for name, record in data.get("files", {}).items():
        path = folder / f"{name}.csv"
        if not path.is_file() or file_digest(path) != record.get("sha256"):
            read_table(folder, name, record)  # raises the precise error
    for stage, record in data.get("partial", {}).items():
        path = folder / partial_name(stage, record)
        if path.is_file() and file_digest(path) != record.get("sha256"):
            raise WorkbenchError(
                f"{str(folder)!r}: {path.name} was changed after it was written (its sha256 "
                f"differs from the one in {CONFIG_FILE}); delete it to redo that stage"
            )
    return data


class ResultStore:
    """An opened, locked results folder (or nothing, for in-memory runs).

    Use as a context manager: `with ResultStore(folder) as store: ...`. `store.previous` is
    the folder's `config.json` from an earlier run (None for a new folder), already checked:
    every recorded file exists with its recorded hash, and no CEL table is unrecorded.
    """

    def __init__(self, folder: str | Path | None, overwrite: bool = False) -> None:
        self.folder = Path(folder) if folder is not None else None
        self.overwrite = overwrite
        self.previous: dict | None = None
        self.files: dict[str, dict] = {}
        self.partials: dict[str, dict] = {}  # stage -> record of its checkpoint
        self._lock = None

    def __enter__(self) -> "ResultStore":
        if self.folder is None:
            return self
        folder = self.folder
        if folder.exists() and not folder.is_dir():
            raise WorkbenchError(f"--out {str(folder)!r} is a file; expected a folder (new or a "
                                 "CEL results folder)")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise WorkbenchError(f"cannot create results folder {str(folder)!r}: {e.strerror}") \
                from None
        check_writable(folder)
        self._lock = acquire_lock(folder)
        try:
            if self.overwrite:
                self._empty()
            self._check_contents()
        except BaseException:
            self._release()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self._release()

    def _release(self) -> None:
        if self._lock is not None:
            lock, self._lock = self._lock, None
            release_lock(self.folder, lock)

    def _empty(self) -> None:
        """Delete everything in an earlier CEL results folder but the lock (held by us)."""
        if not (self.folder / CONFIG_FILE).is_file():
            return  # not a results folder: the usual checks decide
        read_run_file(self.folder)  # only ever delete a CEL results folder
        for path in self.folder.iterdir():
            if path.name == LOCK_FILE:
                continue
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()

    def _check_contents(self) -> None:
        folder = self.folder
        tables = [n for n in TABLES if (folder / f"{n}.csv").exists()]
        if not (folder / CONFIG_FILE).is_file():
            if tables:
                raise WorkbenchError(
                    f"{str(folder)!r} holds CEL tables ({', '.join(t + '.csv' for t in tables)}) "
                    f"but no {CONFIG_FILE}, so nothing says which run made them; use another "
                    "folder or delete them"
                )
            return
        self.previous = verify_folder(folder)
        files = self.previous.get("files", {})
        # `save` writes tables in pipeline order, then config.json: a run stopped in between
        # leaves tables later than every recorded one unrecorded. They were never loaded and
        # are recomputed, so they go; any other unrecorded table is not this run's.
        last = max((TABLES.index(n) for n in files if n in TABLES), default=-1)
        for name in tables:
            if name not in files and TABLES.index(name) > last:
                (folder / f"{name}.csv").unlink()
            elif name not in files:
                raise WorkbenchError(
                    f"{str(folder)!r}: {name}.csv is not recorded in {CONFIG_FILE} (written by "
                    "another run or an older version); use another folder or delete this one"
                )
        self.files = dict(files)
        # a checkpoint is kept only while recorded and there (`verify_folder` checked its
        # hash); one written but not yet recorded when its run stopped goes
        recorded = self.previous.get("partial", {})
        self.partials = {stage: r for stage, r in recorded.items()
                         if (folder / partial_name(stage, r)).is_file()}
        kept = {partial_name(stage, r) for stage, r in self.partials.items()}
        for path in folder.glob(f"*{PARTIAL_MARK}*"):
            if path.name not in kept and path.is_file():
                path.unlink()

    def load(self, name: str, config: dict) -> pd.DataFrame | None:
        """The stage table `name` if an earlier run with `config` wrote it, else None."""
        if self.folder is None or name not in self.files:
            return None
        df = read_table(self.folder, name, self.files[name], stage_inputs(name, config,
                                                                          self.files))
        return upgrade_table(name, df, config)

    def save(self, run_file: dict, finished: tuple[str, ...] = (),
             **tables: pd.DataFrame) -> None:
        """Write `tables` (in pipeline order; one without columns is not written), then
        `config.json`: `run_file` plus the record of every file. `finished`: stages whose
        checkpoints (`save_partial`) these tables complete: `config.json` no longer records
        them, and then they are deleted."""
        if self.folder is None:
            return
        for name in sorted(tables, key=TABLES.index):
            if tables[name].columns.empty:  # nothing to say: no file (a 1-byte CSV says less)
                continue
            inputs = stage_inputs(name, run_file["config"], self.files)
            self.files[name] = write_table(self.folder, name, tables[name], inputs)
        done = [partial_name(stage, self.partials.pop(stage, {})) for stage in finished]
        self._write_run_file(run_file)
        for name in done:
            (self.folder / name).unlink(missing_ok=True)

    def _write_run_file(self, run_file: dict) -> None:
        partial = {"partial": self.partials} if self.partials else {}
        write_json(self.folder / CONFIG_FILE, {**run_file, "files": self.files, **partial})

    def stage_inputs(self, stage: str, config: dict) -> str:
        """The `inputs` hash of `stage` in this folder (`stage_inputs`): what a stage that
        saves partial work keys it by, without importing this module."""
        return stage_inputs(stage, config, self.files)

    def load_partial(self, stage: str, inputs: str) -> dict | None:
        """The checkpoint of `stage` (`save_partial`) if this folder holds one made from
        `inputs`, else None."""
        data = self.load_partial_bytes(stage, inputs)
        return None if data is None else json.loads(data)

    def load_partial_bytes(self, stage: str, inputs: str) -> bytes | None:
        """The bytes of `stage`'s checkpoint (`save_partial`, `save_partial_bytes`) if this
        folder holds one made from `inputs`, else None."""
        record = self.partials.get(stage)
        if self.folder is None or record is None or record.get("inputs") != inputs:
            return None
        return (self.folder / partial_name(stage, record)).read_bytes()

    def save_partial(self, run_file: dict, stage: str, inputs: str, data: dict) -> None:
        """Write `stage`'s checkpoint `data` (JSON values, key order kept) atomically, then
        `config.json` recording it with its sha256 and `inputs`."""
        self.save_partial_bytes(run_file, stage, inputs,
                                json.dumps(data, default=_json_default).encode())

    def save_partial_bytes(self, run_file: dict, stage: str, inputs: str, data: bytes,
                           suffix: str = "json") -> None:
        """`save_partial` for a checkpoint already in bytes, `<stage>.partial.<suffix>`
        (recorded by its name unless JSON)."""
        if self.folder is None:
            return
        name = f"{stage}{PARTIAL_MARK}{suffix}"
        path = write_text(self.folder / name, data)
        record = {"sha256": file_digest(path), "inputs": inputs}
        self.partials[stage] = record if name == f"{stage}{PARTIAL_SUFFIX}" else {
            **record, "file": name}
        self._write_run_file(run_file)

    def clear(self) -> None:
        """Forget and delete every recorded table (before writing a whole result anew)."""
        for name in self.files:
            (self.folder / f"{name}.csv").unlink(missing_ok=True)
        self.files = {}


def stage_inputs(name: str, config: dict, files: dict[str, dict]) -> str:
    """The `inputs` hash of stage `name`: the config and the hashes of its upstream files."""
    return digest([name, config, [files.get(u, {}).get("sha256") for u in UPSTREAM[name]]])
