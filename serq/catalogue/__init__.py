"""A catalogue of models and GPUs, and the KV-cache blocks vLLM would give a model on a GPU.

Models are Hugging Face ``config.json`` files (shipped ones in ``models/``, or a user's own);
GPUs are small JSON files of datasheet figures (``gpus/``). See docs/sizing.md.
"""
from __future__ import annotations


class CatalogueError(Exception):
    """A catalogue problem the user can act on; its message is printed as it is."""


# Imported after CatalogueError: the submodules import it from here.
from serq.catalogue.gpu import GPU, gpu_names, load_gpu  # noqa: E402
from serq.catalogue.kv import KVPlan, kv_blocks  # noqa: E402
from serq.catalogue.model import Model, load_model, model_names  # noqa: E402

__all__ = ["CatalogueError", "GPU", "KVPlan", "Model", "gpu_names", "kv_blocks", "load_gpu", "load_model",
           "model_names"]
