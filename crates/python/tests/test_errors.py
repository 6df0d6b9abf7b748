"""Every error path raises a Python exception with Switchyard's message, and a batch runs with
the GIL released."""

import os
import threading

import numpy as np
import pytest

import switchyard
from conftest import tiny


def test_a_missing_model_names_its_path(tmp_path):
    missing = tmp_path / "nothing-here"
    with pytest.raises(switchyard.SwitchyardError, match="nothing-here"):
        switchyard.Embedder(str(missing))


def test_a_malformed_checkpoint_says_what_is_wrong(tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(switchyard.SwitchyardError, match="config.json"):
        switchyard.Embedder(tmp_path)


def test_a_model_of_another_task_says_which_type_opens_it():
    with pytest.raises(switchyard.SwitchyardError, match="open it with Classifier"):
        switchyard.Embedder(tiny("bert-classifier"))
    with pytest.raises(switchyard.SwitchyardError, match="open it with Embedder"):
        switchyard.Reranker(tiny("bert"))
    with pytest.raises(switchyard.SwitchyardError, match="SparseEncoder"):
        switchyard.Classifier(tiny("bert-splade"))


def test_devices_and_options_are_checked():
    with pytest.raises(switchyard.SwitchyardError, match="unknown device"):
        switchyard.Embedder(tiny("bert"), device="tpu:0")
    with pytest.raises(switchyard.SwitchyardError, match="computes nothing"):
        switchyard.Embedder(tiny("bert"), device="capture")
    with pytest.raises(ValueError, match="unknown dtype"):
        switchyard.Embedder(tiny("bert"), dtype="f64")
    with pytest.raises(ValueError, match="at least 1"):
        switchyard.Embedder(tiny("bert"), threads=0)
    with pytest.raises(switchyard.SwitchyardError, match="flex only"):
        switchyard.Embedder(tiny("bert"), device="ndarray", threads=2)


def test_the_default_device_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("SWITCHYARD_DEVICE", "nowhere")
    with pytest.raises(switchyard.SwitchyardError, match="SWITCHYARD_DEVICE"):
        switchyard.Embedder(tiny("bert"))
    monkeypatch.delenv("SWITCHYARD_DEVICE")
    assert switchyard.Embedder(tiny("bert")).device == "flex"


def test_inputs_of_the_wrong_type_or_shape_raise():
    model = switchyard.Embedder(tiny("bert"))
    with pytest.raises(TypeError, match=r"sentences\[1\] is int"):
        model.encode(["fine", 3])
    with pytest.raises(TypeError, match="bytes"):
        model.encode(b"raw bytes")
    with pytest.raises(TypeError):
        switchyard.Embedder(42)
    with pytest.raises(ValueError, match="batch_size"):
        model.encode(["a"], batch_size=0)
    with pytest.raises(ValueError, match="output_value"):
        model.encode(["a"], output_value="token_embeddings")
    with pytest.raises(ValueError, match="precision"):
        model.encode(["a"], precision="int8")
    with pytest.raises(ValueError, match="another Embedder"):
        model.encode(["a"], device="cuda:0")
    reranker = switchyard.Reranker(tiny("bert-cross-encoder"))
    with pytest.raises(TypeError, match="pair"):
        reranker.predict([("only one",)])
    with pytest.raises(TypeError, match="query"):
        reranker.rank(None, ["a"])


def test_an_input_the_engine_refuses_is_an_error_not_a_crash():
    model = switchyard.Embedder(tiny("bert"))
    # Over the 1 MiB an input may have: the engine's error, naming the text and the limit.
    with pytest.raises(switchyard.SwitchyardError, match=r"sentences\[3\]: .* limited to 1048576"):
        model.encode(["fine", "a", "b", "word " * 300_000], batch_size=2)
    # The engine's own check, which the Python half's mirrors, names the text in its call.
    with pytest.raises(switchyard.SwitchyardError, match="text 0: .* limited to 1048576"):
        model._native.embed(["word " * 300_000])
    # The model is still usable after an error.
    assert model.encode(["still fine"]).shape == (1, model.get_sentence_embedding_dimension())


def test_a_batch_runs_with_the_gil_released(minilm):
    model = switchyard.Embedder(minilm)
    texts = [f"sentence number {i} about nothing in particular, padded out a little" for i in
             range(256)]
    native = model._native
    ticks = [0]
    during = []

    class Watched:
        """The native model, noting how far another Python thread counted during each call."""

        dim = native.dim
        device = native.device

        def embed(self, batch, prompt_name, prompt):
            before = ticks[0]
            out = native.embed(batch, prompt_name, prompt)
            during.append(ticks[0] - before)
            return out

    model._native = Watched()
    done = threading.Event()

    def count():
        while not done.is_set():
            ticks[0] += 1

    counter = threading.Thread(target=count)
    counter.start()
    try:
        got = model.encode(texts, batch_size=len(texts))
    finally:
        done.set()
        counter.join()
    # With the GIL held for the whole call, the counting thread could not run at all.
    assert during and during[0] > 0, during
    model._native = native
    assert np.array_equal(got, model.encode(texts))


def test_threads_share_one_model(minilm):
    model = switchyard.Embedder(minilm)
    texts = [f"text {i} " * (1 + i % 7) for i in range(64)]
    want = model.encode(texts)
    results = [None] * 4
    errors = []

    def work(k):
        try:
            results[k] = model.encode(texts)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert all(np.array_equal(r, want) for r in results)


def test_the_package_says_its_version_and_types():
    assert switchyard.__version__
    here = os.path.dirname(switchyard.__file__)
    assert os.path.isfile(os.path.join(here, "py.typed"))
    assert os.path.isfile(os.path.join(here, "_switchyard.pyi"))
