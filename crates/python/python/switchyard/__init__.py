"""Switchyard: transformer encoders from Hugging Face checkpoints, on any device this build has.

Sentence-transformers' names and shapes, so existing code switches by changing one import::

    from switchyard import SentenceTransformer   # was: from sentence_transformers import ...

    model = SentenceTransformer("sentence-transformers/all-MiniLM-L6-v2")
    vectors = model.encode(["A man is eating food.", "A man eats a meal."])  # (2, 384) float32

- :class:`Embedder` (also ``SentenceTransformer``): sentence embeddings;
- :class:`Reranker` (also ``CrossEncoder``): a cross-encoder's scores and rankings;
- :class:`Classifier`: a sequence classifier's labels, or a token classifier's label per word;
- :class:`SparseEncoder`: SPLADE term weights;
- :func:`devices`: the devices this build and this machine have.

Models are checkpoint directories or Hugging Face repository ids (``OWNER/NAME[@REVISION]``);
devices are named as in the ``switchyard`` command (``flex``, ``cuda:0``, ``remote:HOST:PORT``),
and default to ``SWITCHYARD_DEVICE``, else ``flex``. Texts run in ragged batches without padding,
with the GIL released. Every error is a :class:`SwitchyardError` carrying Switchyard's message.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import _switchyard
from ._switchyard import SwitchyardError, __version__

__all__ = [
    "Classifier",
    "CrossEncoder",
    "Embedder",
    "Reranker",
    "SentenceTransformer",
    "SparseEncoder",
    "SwitchyardError",
    "__version__",
    "devices",
]

Texts = Union[str, Sequence[str]]


def devices() -> List[Dict[str, Any]]:
    """Every device family of this build, or each device this machine has of it.

    Each entry is ``{"device": name, "available": bool, "status": words}``; ``available`` says
    whether a model can be opened on it as named.
    """
    return [
        {"device": name, "available": available, "status": status}
        for name, available, status in _switchyard.devices()
    ]


def _model_path(model: Union[str, "os.PathLike[str]"]) -> str:
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"a model is a directory or a repository id, not {type(model).__name__}")
    return os.fspath(model)


def _texts(texts: Texts, what: str = "sentences") -> Tuple[List[str], bool]:
    """The texts as a list, and whether one text was given alone."""
    if isinstance(texts, str):
        _check_size(texts, what)
        return [texts], True
    if isinstance(texts, (bytes, bytearray)):
        raise TypeError(f"{what} are str, not bytes; decode them first")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise TypeError(f"{what}[{i}] is {type(t).__name__}, not str")
        _check_size(t, f"{what}[{i}]")
    return out, False


def _check_size(text: str, place: str) -> None:
    """The engine's limit on one input, checked here so the error names the whole list's index."""
    limit = _switchyard.MAX_INPUT_BYTES
    if 4 * len(text) > limit:
        n = len(text.encode("utf-8", errors="surrogatepass"))
        if n > limit:
            raise SwitchyardError(f"{place}: an input of {n} bytes; inputs are limited to {limit}")


def _batches(n: int, batch_size: int, show_progress_bar: Optional[bool], desc: str):
    """Ranges of at most ``batch_size`` over ``n`` items, with a progress bar when asked for."""
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, not {batch_size!r}")
    starts = range(0, n, batch_size)
    if show_progress_bar is None:
        show_progress_bar = False
    if not show_progress_bar:
        return ((s, min(s + batch_size, n)) for s in starts)
    return _progress(starts, n, batch_size, desc)


def _progress(starts: Iterable[int], n: int, batch_size: int, desc: str):
    """The batches, counted on a tqdm bar if tqdm is installed, else on stderr."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        tqdm = None
    bar = tqdm(total=n, desc=desc, unit="text") if tqdm is not None else None
    done = 0
    try:
        for s in starts:
            end = min(s + batch_size, n)
            yield s, end
            done = end
            if bar is not None:
                bar.update(end - s)
            else:
                print(f"\r{desc}: {done}/{n}", end="", file=sys.stderr, flush=True)
    finally:
        if bar is not None:
            bar.close()
        elif n:
            print(file=sys.stderr)


class _Model:
    """What every model type shares: opening a native model, and the device it runs on."""

    _native_type: Any = None

    def __init__(
        self,
        model_name_or_path: Union[str, "os.PathLike[str]"],
        device: Optional[str] = None,
        dtype: Optional[str] = None,
        threads: Optional[int] = None,
        max_seq_length: Optional[int] = None,
    ) -> None:
        self._native = self._native_type(
            _model_path(model_name_or_path), device, dtype, threads, max_seq_length
        )

    @property
    def device(self) -> str:
        """The device the model runs on."""
        return self._native.device

    @property
    def prompts(self) -> Dict[str, str]:
        """The model's prompts by name (its ``config_sentence_transformers.json``)."""
        return dict(self._native.prompts)

    @property
    def default_prompt_name(self) -> Optional[str]:
        """The prompt put before texts (a cross-encoder's query) where a call names none, if the
        model has one."""
        return self._native.default_prompt_name


class Embedder(_Model):
    """A sentence embedder, with sentence-transformers' ``SentenceTransformer`` interface.

    :param model_name_or_path: a checkpoint directory or a Hugging Face repository id.
    :param device: a device name (default: ``SWITCHYARD_DEVICE``, else ``flex``).
    :param dtype: the dtype weights are stored and computed in: ``auto`` (default: f16 on a GPU
        with half-precision tensor cores, f32 elsewhere), ``f32``, ``bf16``, ``f16`` or ``int8``,
        where the device has it.
    :param threads: flex's thread count (default: ``SWITCHYARD_THREADS``, else every core).
    :param max_seq_length: where inputs are truncated, in tokens (default: the checkpoint's).
    """

    _native_type = _switchyard.Embedder

    @property
    def max_seq_length(self) -> int:
        """Where inputs are truncated, in tokens, special tokens included."""
        return self._native.max_seq_length

    def get_sentence_embedding_dimension(self) -> int:
        """The width of an embedding."""
        return self._native.dim

    def encode(
        self,
        sentences: Texts,
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
        batch_size: int = 32,
        show_progress_bar: Optional[bool] = None,
        output_value: str = "sentence_embedding",
        precision: str = "float32",
        convert_to_numpy: bool = True,
        convert_to_tensor: bool = False,
        device: Optional[str] = None,
        normalize_embeddings: bool = False,
        truncate_dim: Optional[int] = None,
    ):
        """Embeds ``sentences``: a float32 array of shape ``(len(sentences), dim)``, or
        ``(dim,)`` for one string.

        ``prompt_name`` puts the model's prompt of that name (see :attr:`prompts`) before each
        text, and ``prompt`` that text instead (``""`` for none); without either, the model's
        default prompt goes before each, if it has one. ``batch_size`` sets how many texts
        cross into the engine per call (each call runs in ragged batches sized by the model's
        buckets) and how often the progress bar moves. ``normalize_embeddings`` scales each
        vector to unit length; ``truncate_dim`` keeps the first dimensions (before
        normalising).
        ``convert_to_numpy=False`` gives a list of 1-D arrays; ``convert_to_tensor=True`` a
        torch tensor (torch must be installed). Other outputs, precisions and a per-call device
        are not supported and raise ``ValueError``.
        """
        if output_value != "sentence_embedding":
            raise ValueError(
                f"output_value={output_value!r} is not supported; Switchyard gives "
                "'sentence_embedding' (token embeddings: `switchyard serve`'s /embed_all)"
            )
        if precision != "float32":
            raise ValueError(f"precision={precision!r} is not supported; embeddings are float32")
        if device is not None and device != self.device:
            raise ValueError(
                f"this model runs on {self.device}; open another Embedder with device={device!r}"
            )
        texts, single = _texts(sentences)
        dim = self._native.dim
        out = np.empty((len(texts), dim), dtype=np.float32)
        for start, end in _batches(len(texts), batch_size, show_progress_bar, "Batches"):
            raw = self._native.embed(texts[start:end], prompt_name, prompt)
            out[start:end] = np.frombuffer(raw, dtype=np.float32).reshape(end - start, dim)
        if truncate_dim is not None:
            out = out[:, :truncate_dim]
        if normalize_embeddings:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out = out / np.maximum(norms, 1e-12)
        if convert_to_tensor:
            import torch

            tensor = torch.from_numpy(np.ascontiguousarray(out))
            return tensor[0] if single else tensor
        if single:
            return out[0]
        if not convert_to_numpy:
            return list(out)
        return out

    @property
    def similarity_fn_name(self) -> str:
        """How the model's embeddings are compared: ``cosine`` (unless its
        ``config_sentence_transformers.json`` names another), ``dot``, ``euclidean`` or
        ``manhattan``, as in sentence-transformers."""
        return self._native.similarity_fn_name

    def similarity(self, a, b) -> np.ndarray:
        """The similarity of every row of ``a`` to every row of ``b``, by the model's function
        (:attr:`similarity_fn_name`; the distances negated): shape ``(len(a), len(b))``."""
        a, b = _rows(a), _rows(b)
        name = self.similarity_fn_name
        if name in ("cosine", "dot"):
            if name == "cosine":
                a, b = _unit(a), _unit(b)
            return a @ b.T
        order = 2 if name == "euclidean" else 1
        out = np.empty((len(a), len(b)), dtype=np.float32)
        # A few rows of ``a`` at a time, so the differences stay small in memory.
        step = max(1, (1 << 22) // max(1, b.size))
        for i in range(0, len(a), step):
            diff = a[i : i + step, None, :] - b[None, :, :]
            out[i : i + step] = -np.linalg.norm(diff, ord=order, axis=-1)
        return out

    def similarity_pairwise(self, a, b) -> np.ndarray:
        """The similarity of each row of ``a`` to the same row of ``b``, by the model's
        function: shape ``(len(a),)``."""
        a, b = _rows(a), _rows(b)
        if a.shape != b.shape:
            raise ValueError(f"pairs need equal shapes, not {a.shape} and {b.shape}")
        name = self.similarity_fn_name
        if name == "cosine":
            a, b = _unit(a), _unit(b)
        if name in ("cosine", "dot"):
            return np.einsum("ij,ij->i", a, b)
        return -np.linalg.norm(a - b, ord=2 if name == "euclidean" else 1, axis=1)

    def __repr__(self) -> str:
        return f"Embedder(dim={self._native.dim}, device={self.device!r})"


class Reranker(_Model):
    """A cross-encoder, with sentence-transformers' ``CrossEncoder`` interface.

    Scores are the model's one logit through its ``activation_fn`` (the sigmoid unless the
    model names another, as the ms-marco cross-encoders name ``Identity``), as
    sentence-transformers gives them.
    ``prompt`` (``""`` for none), else the prompt ``prompt_name`` names, else the model's
    default prompt, if it has one, goes before each query, as sentence-transformers 6 puts it.
    Parameters as :class:`Embedder`'s.
    """

    _native_type = _switchyard.Reranker

    def rank(
        self,
        query: str,
        documents: Sequence[str],
        top_k: Optional[int] = None,
        return_documents: bool = False,
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
        batch_size: int = 32,
        show_progress_bar: Optional[bool] = None,
    ) -> List[Dict[str, Any]]:
        """``documents`` ranked against ``query``, most relevant first: ``{"corpus_id",
        "score"}`` each (and ``"text"`` with ``return_documents``), at most ``top_k``."""
        if not isinstance(query, str):
            raise TypeError(f"query is {type(query).__name__}, not str")
        docs, _ = _texts(documents, "documents")
        scores = np.empty(len(docs), dtype=np.float32)
        for start, end in _batches(len(docs), batch_size, show_progress_bar, "Batches"):
            for index, score, _logit in self._native.rank(
                query, docs[start:end], prompt_name, prompt
            ):
                scores[start + index] = score
        # A stable sort keeps equal scores in input order, as the engine's own ranking does.
        order = np.argsort(-scores, kind="stable")
        if top_k is not None:
            order = order[:top_k]
        ranked = []
        for i in order:
            entry: Dict[str, Any] = {"corpus_id": int(i), "score": float(scores[i])}
            if return_documents:
                entry["text"] = docs[i]
            ranked.append(entry)
        return ranked

    def predict(
        self,
        sentences: Union[Tuple[str, str], Sequence[Tuple[str, str]]],
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
        batch_size: int = 32,
        show_progress_bar: Optional[bool] = None,
        convert_to_numpy: bool = True,
    ):
        """The score of each ``(query, document)`` pair, in order: a float32 array (a float for
        one pair)."""
        single = isinstance(sentences, tuple) and len(sentences) == 2
        pairs = [sentences] if single else list(sentences)
        for i, p in enumerate(pairs):
            if not (len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], str)):
                raise TypeError(f"sentences[{i}] is not a (str, str) pair")
        scores = np.empty(len(pairs), dtype=np.float32)
        # The engine scores one query against many documents; group the pairs by query.
        by_query: Dict[str, List[int]] = {}
        for i, (q, _) in enumerate(pairs):
            by_query.setdefault(q, []).append(i)
        for q, idx in by_query.items():
            for start, end in _batches(len(idx), batch_size, show_progress_bar, "Batches"):
                chunk = idx[start:end]
                docs = [pairs[i][1] for i in chunk]
                for index, score, _logit in self._native.rank(q, docs, prompt_name, prompt):
                    scores[chunk[index]] = score
        if single:
            return float(scores[0])
        return scores if convert_to_numpy else scores.tolist()

    def __repr__(self) -> str:
        return f"Reranker(device={self.device!r})"


class Classifier(_Model):
    """A sequence classifier (a label per text) or a token classifier (a label per word).

    Parameters as :class:`Embedder`'s.
    """

    _native_type = _switchyard.Classifier

    @property
    def labels(self) -> List[str]:
        """The labels, in the order of the model's logits."""
        return list(self._native.labels)

    @property
    def is_token_classifier(self) -> bool:
        """Whether it labels each word rather than each text."""
        return bool(self._native.tokens)

    def predict(
        self,
        texts: Texts,
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
        batch_size: int = 32,
        show_progress_bar: Optional[bool] = None,
    ):
        """Each text's prediction, in order (one prediction for one string).

        A sequence classifier gives ``{"label", "score", "logits"}`` per text (``score``: the
        label's softmax probability; its sigmoid for a one-label or multi-label model, its logit
        for a regression model, as transformers' pipeline scores them), with the prompt
        ``prompt_name`` and ``prompt`` choose before each text as :meth:`Embedder.encode`'s do.
        A token classifier gives, per text, a list of ``{"word", "start", "end", "label",
        "score"}``, one per word, read at each word's first sub-token; ``start`` and ``end``
        index the Python string; it takes no prompt.
        """
        if self._native.tokens and (prompt_name is not None or prompt is not None):
            raise ValueError("prompt_name and prompt are for a sequence classifier")
        items, single = _texts(texts, "texts")
        out: List[Any] = []
        for start, end in _batches(len(items), batch_size, show_progress_bar, "Batches"):
            chunk = items[start:end]
            if self._native.tokens:
                for text, words in zip(chunk, self._native.label_words(chunk)):
                    out.append([_word(text, *w) for w in words])
            else:
                for label, score, logits in self._native.predict(chunk, prompt_name, prompt):
                    out.append({"label": label, "score": score, "logits": list(logits)})
        return out[0] if single else out

    def __repr__(self) -> str:
        kind = "tokens" if self.is_token_classifier else "sequences"
        return f"Classifier({kind}, labels={self.labels!r}, device={self.device!r})"


def _rows(x) -> np.ndarray:
    """``x`` as a float32 matrix of one vector per row."""
    return np.atleast_2d(np.asarray(x, dtype=np.float32))


def _unit(x: np.ndarray) -> np.ndarray:
    """Each row scaled to unit length (a zero row stays zero)."""
    return x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)


def _word(text: str, start: int, end: int, word: str, label: str, score: float) -> Dict[str, Any]:
    """A labelled word, its UTF-8 byte offsets turned into the string's character offsets."""
    raw = text.encode("utf-8")
    first = len(raw[:start].decode("utf-8", errors="ignore"))
    return {"word": word, "start": first, "end": first + len(word), "label": label, "score": score}


class SparseEncoder(_Model):
    """A SPLADE sparse encoder. Parameters as :class:`Embedder`'s."""

    _native_type = _switchyard.SparseEncoder

    def encode(
        self,
        sentences: Texts,
        batch_size: int = 32,
        show_progress_bar: Optional[bool] = None,
        return_ids: bool = False,
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
    ):
        """Each text's terms with their weights, heaviest first (one dict for one string).

        Keys are the vocabulary's token strings, or token ids with ``return_ids=True`` (a
        token without text in the vocabulary is keyed by its id either way). ``prompt_name``
        and ``prompt`` choose the prompt before each text as :meth:`Embedder.encode`'s do.
        """
        texts, single = _texts(sentences)
        out: List[Dict[Union[str, int], float]] = []
        for start, end in _batches(len(texts), batch_size, show_progress_bar, "Batches"):
            for terms in self._native.encode(texts[start:end], prompt_name, prompt):
                out.append(
                    {
                        (i if return_ids or token is None else token): weight
                        for i, token, weight in terms
                    }
                )
        return out[0] if single else out

    def __repr__(self) -> str:
        return f"SparseEncoder(device={self.device!r})"


SentenceTransformer = Embedder
"""sentence-transformers' name for :class:`Embedder`."""

CrossEncoder = Reranker
"""sentence-transformers' name for :class:`Reranker`."""
