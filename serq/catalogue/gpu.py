"""A GPU's datasheet figures, in the file's explicit units, converted to SI by the reader.

File keys (units in the names): bf16_tflops, fp8_tflops (null where the GPU has no FP8), hbm_gb
(datasheet capacity, 1e9 bytes), hbm_tb_s (1e12 bytes/s), link_gb_s (the interconnect bandwidth per GPU,
ONE direction, 1e9 bytes/s), usable_mib (optional: the total memory torch / cudaMemGetInfo reports, in
MiB, which vLLM's gpu_memory_utilization multiplies), link (optional: what the link is), _source.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from serq.catalogue import CatalogueError
from serq.catalogue._files import names, read_json, resolve

GPUS_DIR = Path(__file__).parent / "gpus"
REQUIRED = ("bf16_tflops", "hbm_gb", "hbm_tb_s", "link_gb_s")
OPTIONAL = ("fp8_tflops", "usable_mib", "link", "description")
MIB = 1 << 20


@dataclass(frozen=True)
class GPU:
    name: str
    description: str
    bf16_flops: int  # dense, FLOP/s
    fp8_flops: int | None  # dense, FLOP/s; None where the GPU has no FP8 tensor cores
    hbm_bytes: int  # datasheet capacity
    memory_bytes: int  # total memory as torch reports it: what vLLM's gpu_memory_utilization multiplies
    hbm_bandwidth: int  # bytes/s
    link_bandwidth: int  # bytes/s per GPU, one direction
    link: str
    path: str
    notes: tuple[str, ...] = ()
    source: dict | None = None


def _number(data: dict, key: str, path: Path, *, optional: bool = False) -> float | None:
    v = data.get(key)
    if v is None and optional:
        return None
    # JSON as Python reads it takes NaN and Infinity, and a huge figure overflows to inf once scaled
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < 1e9:
        raise CatalogueError(f"'{key}' in {path} must be a number > 0 (and below 1e9 in its unit), not {v!r}")
    return float(v)


def from_dict(data: dict, path: Path, name: str) -> GPU:
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise CatalogueError(f"{path} has no {', '.join(repr(k) for k in missing)}; a GPU file needs "
                             f"{', '.join(REQUIRED)} (and may give {', '.join(OPTIONAL)})")
    notes = []
    hbm = _number(data, "hbm_gb", path) * 1e9
    usable = _number(data, "usable_mib", path, optional=True)
    if usable is None:
        # Without the torch-reported total, the datasheet capacity (in 1e9 bytes) stands in; it understates
        # what vLLM sees: an H100 "80GB" reports 81090 MiB = 85.0e9 bytes, an A100 "40GB" 42.5e9.
        notes.append("usable_mib absent: the datasheet hbm_gb is taken as the memory vLLM sees")
        memory = int(hbm)
    else:
        memory = int(usable * MIB)
    fp8 = _number(data, "fp8_tflops", path, optional=True)
    return GPU(name=name, description=str(data.get("description", name)),
               bf16_flops=round(_number(data, "bf16_tflops", path) * 1e12),
               fp8_flops=None if fp8 is None else round(fp8 * 1e12),
               hbm_bytes=round(hbm), memory_bytes=memory, hbm_bandwidth=round(_number(data, "hbm_tb_s", path) * 1e12),
               link_bandwidth=round(_number(data, "link_gb_s", path) * 1e9), link=str(data.get("link", "")),
               path=str(path), notes=tuple(notes), source=data.get("_source"))


def gpu_names() -> list[str]:
    return names(GPUS_DIR)


def load_gpu(name_or_path) -> GPU:
    """A shipped GPU by name (see gpu_names()), or a JSON file of the same keys."""
    path = resolve(name_or_path, GPUS_DIR, "GPU")
    return from_dict(read_json(path), path, path.stem)
