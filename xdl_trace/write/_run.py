"""Who writes a run: rank, world size and local rank (launcher environment or torch.distributed),
and the run metadata every data file's Header records (docs/format.md "Runs")."""

import hashlib
import json
import numbers
import os
import sys
import threading
import uuid
import weakref
from dataclasses import dataclass

from .. import _core, _names, errors

RANK_ENV_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")
WORLD_SIZE_ENV_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS")
LOCAL_RANK_ENV_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID")
# A job's id as the launcher gives it to every rank (torchrun, Slurm, PMIx, Open MPI).
JOB_ID_ENV_VARS = (
    "TORCHELASTIC_RUN_ID",
    "SLURM_JOB_ID",
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
)
RUN_ID_ENV_VAR = "XDL_TRACE_RUN_ID"
MAX_RUN_ID_CHARS = 128

# Runs begun by this process per (output_dir, prefix, name, rank): the n-th run of every rank
# of a job in a directory shares an id, so ranks agree without talking to each other.
_begun = {}
_begun_lock = threading.Lock()
# The job of a process that no launcher names: itself (and children it forks).
_PROCESS_JOB = f"process={uuid.uuid4().hex}"
# The training hook this process began last per (output_dir, name, rank): an eval hook of that
# directory given no gstep takes the gstep it last stepped (training_hook).
_training_hooks = {}  # Guarded by _training_hooks_lock: weak references.
_training_hooks_lock = threading.Lock()

# Ranks are int32 on the wire (Meta.rank, RunInfo.rank).
MAX_RANK = 2**31 - 1


@dataclass(frozen=True)
class Placement:
    """Where this process sits in its job. source: "config", the environment variable's name,
    "torch.distributed" or "default" (a lone process)."""

    rank: int
    world_size: int  # 0: unknown.
    local_rank: int  # -1: unknown.
    source: str


def _env_int(environ, names, minimum):
    """(value, variable) of the first of `names` set in environ, else (None, None)."""
    for var in names:
        value = environ.get(var)
        if value is None or value.strip() == "":
            continue
        try:
            number = int(value)
        except ValueError:
            raise errors.InvalidArgumentError(
                f"xdl_trace: environment variable {var}={value!r} is not an integer"
            ) from None
        if number < minimum or number > MAX_RANK:
            raise errors.InvalidArgumentError(
                f"xdl_trace: environment variable {var}={value!r} is out of range "
                f"({minimum} to {MAX_RANK})"
            )
        return number, var
    return None, None


def _torch_distributed():
    """torch.distributed when torch is already imported and a process group is initialized."""
    torch = sys.modules.get("torch")  # Never import torch for numpy-only users.
    if torch is None:
        return None
    dist = getattr(torch, "distributed", None)
    try:
        if dist is None or not dist.is_available() or not dist.is_initialized():
            return None
    except Exception:  # A half-built torch: no placement from it.
        return None
    return dist


def check_rank(value, key="rank"):
    """value as an int rank; ValueError naming `key` unless it is an integer in [0, 2**31 - 1]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise errors.InvalidArgumentError(
            f"xdl_trace: config '{key}': {value!r} is invalid; expected an integer >= 0"
        )
    if not 0 <= value <= MAX_RANK:
        raise errors.InvalidArgumentError(
            f"xdl_trace: config '{key}': {value!r} is invalid; expected an integer from 0 to "
            f"{MAX_RANK}"
        )
    return int(value)


def detect_placement(rank=None, environ=None):
    """The Placement of this process. rank: the config's rank (None: detect it from RANK,
    OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID, first set, else torch.distributed when
    initialized, else 0). World size and local rank come from the environment (WORLD_SIZE, ...,
    LOCAL_RANK, ...), else torch.distributed; a lone process is rank 0 of 1."""
    environ = os.environ if environ is None else environ
    dist = _torch_distributed()
    if rank is not None:
        source = "config"
        rank = check_rank(rank)
    else:
        rank, source = _env_int(environ, RANK_ENV_VARS, 0)
        if rank is None and dist is not None:
            rank, source = int(dist.get_rank()), "torch.distributed"
        if rank is None:
            rank, source = 0, "default"
    world_size, _ = _env_int(environ, WORLD_SIZE_ENV_VARS, 1)
    if world_size is None and dist is not None:
        world_size = int(dist.get_world_size())
    if world_size is None:
        world_size = 1 if source == "default" else 0
    local_rank, _ = _env_int(environ, LOCAL_RANK_ENV_VARS, 0)
    if local_rank is None:
        local_rank = 0 if world_size == 1 else -1
    return Placement(rank, world_size, local_rank, source)


def detect_rank(environ=None):
    """The rank from RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID (first set), else from
    torch.distributed when it is initialized, else 0."""
    return detect_placement(None, environ).rank


def replicated_globs(replicated):
    """TraceHook(replicated=) as a list of glob patterns, or None for the documented rule:
    None or True -> None; False -> [] (nothing replicated: model or pipeline parallelism); a
    comma-separated string or a list of strings -> the patterns. InvalidArgumentError otherwise."""
    if replicated is None or replicated is True:
        return None
    if replicated is False:
        return []
    if isinstance(replicated, str):
        return [p for p in replicated.split(",") if p]
    if isinstance(replicated, (list, tuple)) and all(isinstance(p, str) for p in replicated):
        return list(replicated)
    raise errors.InvalidArgumentError(
        "xdl_trace: replicated must be None, True, False, a glob string or a list of globs, "
        f"got {replicated!r}"
    )


def metadata_json(metadata, replicated=None):
    """The user's run metadata as a JSON object string ("" for None), with `replicated` (a
    replicated_globs list) under _names.REPLICATED_ENTRY when not None; ValueError naming 'metadata'
    when it is not a dict of JSON-serializable values."""
    if metadata is not None and not isinstance(metadata, dict):
        raise errors.InvalidArgumentError(
            f"xdl_trace: metadata must be a dict, got {type(metadata).__name__}"
        )
    if replicated is not None:
        metadata = dict(metadata or {}, **{_names.REPLICATED_ENTRY: replicated})
    if metadata is None:
        return ""
    try:
        return json.dumps(metadata, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise errors.InvalidArgumentError(
            f"xdl_trace: metadata is not JSON-serializable: {e}"
        ) from None


def run_info(placement, metadata_string):
    """The core RunInfo of a run starting now (the core fills hostname, pid and start time)."""
    from .._version import __version__

    run = _core.RunInfo()
    run.world_size = placement.world_size
    run.local_rank = placement.local_rank
    run.argv = [str(a) for a in sys.argv]
    run.version = __version__
    run.metadata_json = metadata_string
    return run


def gstep_key(output_dir, name, rank):
    """Where ``note_training_hook`` keeps the training hook of output_dir (file name, rank)."""
    return (os.path.abspath(output_dir), name, rank)


def note_training_hook(key, hook):
    """A training hook begins in the directory of `key` (``gstep_key``)."""
    with _training_hooks_lock:
        _training_hooks[key] = weakref.ref(hook)


def training_hook(key):
    """The training hook this process began last in the directory of `key`, while it lives;
    None without one. An eval hook stamps its records with the gstep it last stepped: the step
    it evaluates, as TensorFlow's evaluation reads the global step and W&B logs at the step
    counter it shares."""
    with _training_hooks_lock:
        ref = _training_hooks.get(key)
    return None if ref is None else ref()


def _next_run_number(output_dir, prefix, name, rank):
    key = (os.path.abspath(output_dir), prefix, name, rank)
    with _begun_lock:
        n = _begun.get(key, 0)
        _begun[key] = n + 1
    return n


def _runs_on_disk(output_dir, prefix, name, rank):
    """How many runs in output_dir already have files of `rank` (0 where none can be read)."""
    try:
        reader = _core.TraceReader.open(output_dir, prefix, name, check_record_crc=False)
        return sum(rank in summary["ranks"] for summary in reader.runs())
    except Exception:  # No files yet, or none readable: this is the first run here.
        return 0


def _job_key(environ):
    """The launcher's job id ("VAR=value"); for ranks started by hand (WORLD_SIZE > 1, no
    launcher's id) what they share: the world size and the rendezvous address
    (MASTER_ADDR:MASTER_PORT, as torch.distributed's env:// reads them); else None."""
    for var in JOB_ID_ENV_VARS:
        value = environ.get(var, "").strip()
        if value and value != "none":
            if var == "SLURM_JOB_ID":  # Each srun step of a job is its own run.
                value += "." + environ.get("SLURM_STEP_ID", "")
            return f"{var}={value}"
    world = environ.get("WORLD_SIZE", "").strip()
    if world.isdigit() and int(world) > 1:
        # The n-th run in output_dir of each rank then shares one id (shared_run_id's n).
        master = (
            f"{environ.get('MASTER_ADDR', '').strip()}:{environ.get('MASTER_PORT', '').strip()}"
        )
        return f"WORLD_SIZE={world};MASTER={master}"
    return None


def _hashed(job, prefix, name, n):
    return hashlib.sha256(f"{job}/{prefix}.{name}/{n}".encode()).hexdigest()[:32]


def shared_run_id(output_dir, prefix, name, rank, environ=None):
    """The id of this rank's next run of `prefix`.`name` in output_dir: the n-th run there of
    every rank of one job gets the same id, so the ranks' files form one run. The job is, in order:
    XDL_TRACE_RUN_ID (used as is; its n-th run gets ".n" appended for n > 0); the launcher's
    job id (TORCHELASTIC_RUN_ID, SLURM_JOB_ID + SLURM_STEP_ID, PMIX_NAMESPACE,
    OMPI_MCA_ess_base_jobid); ranks started by hand (WORLD_SIZE > 1): WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT, so their n-th runs here share an id; an initialized torch.distributed of several ranks, whose first
    rank to begin puts a fresh id in the process group's store (compare-and-set: no rank waits
    for another); else this process (ranks traced one after another in one process, or by
    processes it forks, are one run)."""
    environ = os.environ if environ is None else environ
    n = _next_run_number(output_dir, prefix, name, rank)
    explicit = environ.get(RUN_ID_ENV_VAR, "").strip()
    if explicit:
        if len(explicit) > MAX_RUN_ID_CHARS or not explicit.isprintable():
            raise errors.InvalidArgumentError(
                f"xdl_trace: environment variable {RUN_ID_ENV_VAR}={explicit!r} must be printable "
                f"and at most {MAX_RUN_ID_CHARS} characters"
            )
        return explicit if n == 0 else f"{explicit}.{n}"
    job = _job_key(environ)
    if job is not None and job.startswith("WORLD_SIZE="):
        # Ranks started by hand share no launcher's id: a run of theirs is the n-th in
        # output_dir of each rank, counted on disk, so a second launch is a second run.
        return _hashed(job, prefix, name, _runs_on_disk(output_dir, prefix, name, rank))
    if job is not None:
        return _hashed(job, prefix, name, n)
    dist = _torch_distributed()
    if dist is not None:
        try:
            if dist.get_world_size() > 1:
                from torch.distributed import distributed_c10d

                store = distributed_c10d._get_default_store()
                key = f"xdl_trace/run_id/{prefix}.{name}/{n}"
                return store.compare_set(key, "", uuid.uuid4().hex).decode()
        except Exception:  # An old torch or a store without compare_set: this process's id.
            pass
    return _hashed(_PROCESS_JOB, prefix, name, n)
