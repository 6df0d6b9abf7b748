"""Type stubs of the native module; use the package's classes (``switchyard.Embedder``...)."""

from typing import Dict, List, Optional, Tuple

__version__: str
MAX_INPUT_BYTES: int

class SwitchyardError(Exception):
    """An error from Switchyard: a model that cannot be opened or run, or inputs it cannot take."""

class Embedder:
    similarity_fn_name: str
    dim: int
    max_seq_length: int
    device: str
    prompts: Dict[str, str]
    default_prompt_name: Optional[str]
    def __init__(
        self,
        model: str,
        device: Optional[str] = None,
        dtype: Optional[str] = None,
        threads: Optional[int] = None,
        max_seq_length: Optional[int] = None,
    ) -> None: ...
    def embed(
        self,
        texts: List[str],
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
    ) -> bytes: ...

class Reranker:
    device: str
    prompts: Dict[str, str]
    default_prompt_name: Optional[str]
    def __init__(
        self,
        model: str,
        device: Optional[str] = None,
        dtype: Optional[str] = None,
        threads: Optional[int] = None,
        max_seq_length: Optional[int] = None,
    ) -> None: ...
    def rank(
        self,
        query: str,
        docs: List[str],
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
    ) -> List[Tuple[int, float, float]]: ...

class Classifier:
    labels: List[str]
    tokens: bool
    device: str
    prompts: Dict[str, str]
    default_prompt_name: Optional[str]
    def __init__(
        self,
        model: str,
        device: Optional[str] = None,
        dtype: Optional[str] = None,
        threads: Optional[int] = None,
        max_seq_length: Optional[int] = None,
    ) -> None: ...
    def predict(
        self,
        texts: List[str],
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
    ) -> List[Tuple[str, float, List[float]]]: ...
    def label_words(self, texts: List[str]) -> List[List[Tuple[int, int, str, str, float]]]: ...

class SparseEncoder:
    device: str
    prompts: Dict[str, str]
    default_prompt_name: Optional[str]
    def __init__(
        self,
        model: str,
        device: Optional[str] = None,
        dtype: Optional[str] = None,
        threads: Optional[int] = None,
        max_seq_length: Optional[int] = None,
    ) -> None: ...
    def encode(
        self,
        texts: List[str],
        prompt_name: Optional[str] = None,
        prompt: Optional[str] = None,
    ) -> List[List[Tuple[int, Optional[str], float]]]: ...

def devices() -> List[Tuple[str, bool, str]]: ...
