"""Embedding a large corpus with Ray Data: one Switchyard model per actor, Parquet in and out.

::

    import ray
    from switchyard.ray import embed_parquet

    ray.init()                      # or ray.init(address="auto") on a cluster
    embed_parquet("all-MiniLM-L6-v2-dir", "corpus/", "embeddings/", actors=4, threads=4)

Each actor opens the model once and embeds batches of rows as Ray Data streams them; rows keep
their columns and gain an ``embedding`` column. A run that stops part way is resumed by running
it again: rows whose ids are already in the output are skipped. See docs/scale-out.md.
"""

from __future__ import annotations

import os
from typing import Any, Dict, Optional

from . import Embedder


class EmbedBatches:
    """A callable class for ``Dataset.map_batches``: embeds ``text_column`` of each batch into
    ``output_column`` (float32 rows, one per text).

    Ray constructs one per actor, so each actor opens the model once; the constructor's
    arguments are :class:`switchyard.Embedder`'s, and ``prompt_name`` and ``prompt`` are
    :meth:`switchyard.Embedder.encode`'s (default: the model's default prompt, if it names one).
    """

    def __init__(
        self,
        model: str,
        device: Optional[str] = None,
        dtype: Optional[str] = None,
        threads: Optional[int] = None,
        text_column: str = "text",
        output_column: str = "embedding",
        normalize_embeddings: bool = False,
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
    ) -> None:
        self.model = Embedder(model, device=device, dtype=dtype, threads=threads)
        self.text_column = text_column
        self.output_column = output_column
        self.normalize_embeddings = normalize_embeddings
        self.prompt_name = prompt_name
        self.prompt = prompt

    def __call__(self, batch: Dict[str, Any]) -> Dict[str, Any]:
        if self.text_column not in batch:
            raise KeyError(f"the batch has no column {self.text_column!r}: {sorted(batch)}")
        texts = [str(t) for t in batch[self.text_column]]
        vectors = self.model.encode(
            texts,
            prompt_name=self.prompt_name,
            prompt=self.prompt,
            batch_size=max(len(texts), 1),
            normalize_embeddings=self.normalize_embeddings,
        )
        out = dict(batch)
        out[self.output_column] = vectors
        return out


def _done_ids(dest: str, id_column: str):
    """The ids already embedded into ``dest`` by an earlier run, or an empty set."""
    import ray

    if not os.path.isdir(dest) or not any(n.endswith(".parquet") for n in os.listdir(dest)):
        return set()
    done = ray.data.read_parquet(dest, columns=[id_column])
    return {row[id_column] for row in done.iter_rows()}


def embed_parquet(
    model: str,
    source: str,
    dest: str,
    *,
    text_column: str = "text",
    id_column: str = "id",
    actors: int = 1,
    threads: Optional[int] = None,
    device: Optional[str] = None,
    dtype: Optional[str] = None,
    batch_size: int = 256,
    normalize_embeddings: bool = False,
    cpus_per_actor: Optional[float] = None,
    prompt_name: Optional[str] = None,
    prompt: Optional[str] = None,
) -> int:
    """Embeds the ``text_column`` of the Parquet files at ``source`` into Parquet files at
    ``dest``, with ``actors`` Ray actors running flex on ``threads`` threads each (or one GPU
    each on a GPU ``device``). Each actor reserves ``cpus_per_actor`` of Ray's CPUs (default:
    ``threads``, else 1); leave Ray Data at least one CPU to read and write with, or the
    pipeline waits for a CPU that never frees. Resumable: rows whose ``id_column`` is already in
    ``dest`` are skipped. Returns the number of rows embedded by this run. ``prompt_name`` or
    ``prompt`` choose the prompt before each text as :meth:`switchyard.Embedder.encode` does
    (default: the model's default prompt, if it names one); keep the same choice when resuming.

    Rows stream through: the output is written block by block as the actors finish them, so
    memory is bounded by the blocks in flight, not the corpus.
    """
    import ray

    if actors < 1:
        raise ValueError(f"actors must be at least 1, not {actors}")
    done = _done_ids(dest, id_column)
    ds = ray.data.read_parquet(source)
    if id_column not in ds.schema().names:
        raise KeyError(f"{source} has no column {id_column!r} to resume by")
    if done:
        ds = ds.filter(lambda row: row[id_column] not in done)
    todo = ds.count()
    if todo == 0:
        return 0
    gpu = device is not None and device.split(":")[0] in ("cuda", "rocm", "tch")
    cpus = cpus_per_actor if cpus_per_actor is not None else (threads or 1)
    resources: Dict[str, Any] = {"num_gpus": 1} if gpu else {"num_cpus": cpus}
    embedded = ds.map_batches(
        EmbedBatches,
        fn_constructor_kwargs={
            "model": model,
            "device": device,
            "dtype": dtype,
            "threads": None if gpu else threads,
            "text_column": text_column,
            "normalize_embeddings": normalize_embeddings,
            "prompt_name": prompt_name,
            "prompt": prompt,
        },
        batch_size=batch_size,
        concurrency=actors,
        batch_format="numpy",
        **resources,
    )
    embedded.write_parquet(dest)
    return todo


__all__ = ["EmbedBatches", "embed_parquet"]
