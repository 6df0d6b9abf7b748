"""Each model type through the Python API: equal to the `switchyard` command's outputs, and the
real all-MiniLM-L6-v2 within the Rust tests' tolerance of sentence-transformers."""

import json
import shutil

import numpy as np
import pytest

import switchyard
from conftest import tiny

TEXTS = ["cats sat on mats", "the sea", "A man is eating food.", "naïve café ☕ bits"]


def test_minilm_matches_sentence_transformers(minilm, minilm_expected):
    model = switchyard.SentenceTransformer(minilm)
    got = model.encode(minilm_expected["sentences"])
    want = np.array(minilm_expected["embeddings"], dtype=np.float32)
    assert got.shape == want.shape == (8, 384) and got.dtype == np.float32
    # 2e-6, as crates/models/tests/minilm.rs: the worst difference measured there is 2.8e-7,
    # two f32 implementations summing in different orders.
    assert np.abs(got - want).max() <= 2e-6


def test_embeddings_equal_the_commands(minilm, cli):
    got = switchyard.Embedder(minilm).encode(TEXTS)
    lines = cli(["embed", "--model", minilm, "--input", "-"], "\n".join(TEXTS) + "\n")
    assert [line["text"] for line in lines] == TEXTS
    # The command prints each f32 in its shortest form, which reads back as the same f32.
    assert np.array_equal(got, np.array([line["embedding"] for line in lines], dtype=np.float32))


def test_encode_takes_sentence_transformers_arguments(minilm):
    model = switchyard.Embedder(minilm)
    many = model.encode(TEXTS)
    assert model.get_sentence_embedding_dimension() == 384
    one = model.encode(TEXTS[0])
    assert one.shape == (384,) and np.array_equal(one, many[0])
    assert model.encode([]).shape == (0, 384)
    # Batches cross into the engine separately; a text's vector does not depend on its company.
    assert np.allclose(model.encode(TEXTS, batch_size=1), many, atol=1e-6, rtol=0)
    assert np.array_equal(model.encode(TEXTS, prompt="query: "), model.encode(
        ["query: " + t for t in TEXTS]
    ))
    short = model.encode(TEXTS, truncate_dim=64, normalize_embeddings=True)
    assert short.shape == (4, 64)
    assert np.allclose(np.linalg.norm(short, axis=1), 1.0, atol=1e-6)
    as_list = model.encode(TEXTS, convert_to_numpy=False)
    assert isinstance(as_list, list) and np.array_equal(as_list[2], many[2])
    sims = model.similarity(many, many)
    assert sims.shape == (4, 4) and np.allclose(np.diag(sims), 1.0, atol=1e-5)


def test_encode_puts_the_models_prompts_before_the_texts(minilm, tmp_path):
    # all-MiniLM-L6-v2 with E5's prompts, `query` the default.
    e5 = tmp_path / "e5"
    shutil.copytree(minilm, e5)
    prompts = {"query": "query: ", "passage": "passage: "}
    config = {"prompts": prompts, "default_prompt_name": "query"}
    (e5 / "config_sentence_transformers.json").write_text(json.dumps(config))
    plain, model = switchyard.Embedder(minilm), switchyard.Embedder(str(e5))
    assert (plain.prompts, plain.default_prompt_name) == ({}, None)
    assert (model.prompts, model.default_prompt_name) == (prompts, "query")

    def prefixed(prompt):
        return plain.encode([prompt + t for t in TEXTS])

    assert np.array_equal(model.encode(TEXTS), prefixed("query: "))
    assert np.array_equal(model.encode(TEXTS, prompt_name="passage"), prefixed("passage: "))
    # sentence-transformers' order: the prompt name comes second; a prompt text wins over it.
    assert np.array_equal(model.encode(TEXTS, "passage"), prefixed("passage: "))
    assert np.array_equal(model.encode(TEXTS, "passage", prompt="q: "), prefixed("q: "))
    assert np.array_equal(model.encode(TEXTS, prompt=""), plain.encode(TEXTS))
    unknown = 'no prompt named "doc"; its prompts: passage, query'
    with pytest.raises(switchyard.SwitchyardError, match=unknown):
        model.encode(TEXTS, prompt_name="doc")


def test_similarity_is_the_models_function(tmp_path):
    vectors = np.array([[1.0, 2.0, -2.0], [4.0, 0.0, 1.0], [0.0, 0.0, 0.0]], dtype=np.float32)
    a, b = vectors[:2], vectors
    # sentence-transformers' functions, written out: the distances are negated.
    want = {
        "cosine": np.array([[1.0, 2 / (3 * 17**0.5), 0.0], [2 / (3 * 17**0.5), 1.0, 0.0]]),
        "dot": a @ b.T,
        "euclidean": -np.array([[0.0, 22**0.5, 3.0], [22**0.5, 0.0, 17**0.5]]),
        "manhattan": -np.array([[0.0, 8.0, 5.0], [8.0, 0.0, 5.0]]),
    }
    for name, expected in [(None, want["cosine"]), *want.items()]:
        model_dir = tmp_path / str(name)
        shutil.copytree(tiny("bert"), model_dir)
        modules = [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        ]
        (model_dir / "modules.json").write_text(json.dumps(modules))
        (model_dir / "1_Pooling").mkdir()
        (model_dir / "1_Pooling" / "config.json").write_text('{"pooling_mode": "mean"}')
        config = {"similarity_fn_name": name}
        (model_dir / "config_sentence_transformers.json").write_text(json.dumps(config))
        model = switchyard.Embedder(str(model_dir))
        assert model.similarity_fn_name == (name or "cosine")
        got = model.similarity(a, b)
        assert got.shape == (2, 3) and np.allclose(got, expected, atol=1e-6), name
        assert np.allclose(model.similarity_pairwise(a, b[:2]), np.diag(expected[:, :2]), atol=1e-6)


def test_a_progress_bar_counts_every_text(minilm, capsys):
    model = switchyard.Embedder(minilm)
    model.encode(TEXTS, batch_size=3, show_progress_bar=True)
    err = capsys.readouterr().err
    assert "4/4" in err, err


def test_rerank_and_predict_equal_the_commands(cli):
    model = tiny("bert-cross-encoder")
    reranker = switchyard.CrossEncoder(model)
    ranked = reranker.rank("what do cats do?", TEXTS, return_documents=True)
    lines = cli(["rerank", "--model", model, "--query", "what do cats do?", *TEXTS], "")
    assert [r["corpus_id"] for r in ranked] == [line["index"] for line in lines]
    assert [r["score"] for r in ranked] == [np.float32(line["score"]) for line in lines]
    assert [r["text"] for r in ranked] == [line["document"] for line in lines]
    assert len(reranker.rank("what do cats do?", TEXTS, top_k=2)) == 2
    # predict scores pairs in their order, grouping them by query.
    pairs = [("what do cats do?", t) for t in TEXTS] + [("the sea?", TEXTS[1])]
    scores = reranker.predict(pairs, batch_size=3)
    by_index = {line["index"]: np.float32(line["score"]) for line in lines}
    assert list(scores[:4]) == [by_index[i] for i in range(4)]
    assert scores[4] == reranker.rank("the sea?", [TEXTS[1]])[0]["score"]
    assert reranker.predict(pairs[0]) == scores[0]


def st6_cross_encoder(fixture: str, to, prompts: dict, default: str) -> str:
    """The tiny classifier ``fixture`` copied to ``to`` with the files sentence-transformers 6
    saves for a ``CrossEncoder`` naming ``prompts``, ``default`` the default."""
    to.mkdir()
    for f in ["config.json", "model.safetensors", "tokenizer.json"]:
        shutil.copy(f"{tiny(fixture)}/{f}", to / f)
    transformer = "sentence_transformers.base.modules.transformer.Transformer"
    modules = [{"idx": 0, "name": "0", "path": "", "type": transformer}]
    (to / "modules.json").write_text(json.dumps(modules))
    config = {"model_type": "CrossEncoder", "prompts": prompts, "default_prompt_name": default}
    (to / "config_sentence_transformers.json").write_text(json.dumps(config))
    return str(to)


def test_rank_and_predict_put_the_prompt_before_the_query_as_sentence_transformers_does(tmp_path):
    expected = json.loads(open(f"{tiny('bert-cross-encoder')}/expected-prompts.json").read())
    model = st6_cross_encoder(
        "bert-cross-encoder", tmp_path / "ce", expected["prompts"], expected["default_prompt_name"]
    )
    reranker = switchyard.CrossEncoder(model)
    assert (reranker.prompts, reranker.default_prompt_name) == (expected["prompts"], "query")
    pairs = [tuple(p) for p in expected["pairs"]]
    for which, kw in [("default", {}), ("web", {"prompt_name": "web"}), ("none", {"prompt": ""})]:
        # sentence-transformers 6.3's logits, through its sigmoid; f32 kernels summing in
        # other orders than torch's, a few ulps apart.
        want = 1 / (1 + np.exp(-np.array(expected["logits"][which])))
        assert np.abs(reranker.predict(pairs, **kw) - want).max() <= 1e-5, which
        ranked = reranker.rank(pairs[0][0], [pairs[0][1]], **kw)
        assert abs(ranked[0]["score"] - want[0]) <= 1e-5, which
    # sentence-transformers' order: the prompt name comes second.
    assert np.array_equal(reranker.predict(pairs, "web"), reranker.predict(pairs, prompt_name="web"))
    with pytest.raises(switchyard.SwitchyardError, match='no prompt named "doc"'):
        reranker.rank("q", ["d"], prompt_name="doc")


def test_scores_go_through_the_activation_the_model_names(tmp_path):
    # The ms-marco cross-encoders name Identity: sentence-transformers gives their logits.
    model = tmp_path / "identity"
    shutil.copytree(tiny("bert-cross-encoder"), model)
    config = json.loads((model / "config.json").read_text())
    config["sbert_ce_default_activation_function"] = "torch.nn.modules.linear.Identity"
    (model / "config.json").write_text(json.dumps(config))
    expected = json.loads(open(f"{tiny('bert-cross-encoder')}/expected-prompts.json").read())
    pairs = [tuple(p) for p in expected["pairs"]]
    got = switchyard.CrossEncoder(str(model)).predict(pairs)
    # sentence-transformers 6.3's logits; f32 kernels a few ulps apart.
    assert np.abs(got - np.array(expected["logits"]["none"])).max() <= 1e-5


def test_a_classifiers_prompt_goes_before_each_text(tmp_path):
    model = st6_cross_encoder("bert-classifier", tmp_path / "c", {"query": "the sea: "}, "query")
    prompted, plain = switchyard.Classifier(model), switchyard.Classifier(tiny("bert-classifier"))
    assert prompted.predict(TEXTS) == plain.predict(["the sea: " + t for t in TEXTS])
    assert prompted.predict(TEXTS, prompt="") == plain.predict(TEXTS)
    assert prompted.predict(TEXTS, prompt="x ") == plain.predict(["x " + t for t in TEXTS])
    tagger = switchyard.Classifier(tiny("bert-token-classifier"))
    with pytest.raises(ValueError, match="for a sequence classifier"):
        tagger.predict(TEXTS, prompt="x ")


def test_sequence_labels_equal_the_commands(cli):
    model = tiny("bert-classifier")
    classifier = switchyard.Classifier(model)
    assert not classifier.is_token_classifier
    got = classifier.predict(TEXTS)
    lines = cli(["classify", "--model", model, *TEXTS], "")
    assert classifier.labels == lines[0]["labels"]
    for p, line in zip(got, lines):
        assert p["label"] == line["label"]
        assert np.float32(p["score"]) == np.float32(line["score"])
        assert np.array_equal(np.float32(p["logits"]), np.float32(line["logits"]))
    assert classifier.predict(TEXTS[1]) == got[1]


def test_word_labels_equal_the_commands_with_python_offsets(cli):
    model = tiny("bert-token-classifier")
    tagger = switchyard.Classifier(model)
    assert tagger.is_token_classifier
    got = tagger.predict(TEXTS)
    lines = cli(["classify", "--model", model, *TEXTS], "")
    for text, words, line in zip(TEXTS, got, lines):
        assert [w["label"] for w in words] == [t["label"] for t in line["tokens"]]
        assert [np.float32(w["score"]) for w in words] == [
            np.float32(t["score"]) for t in line["tokens"]
        ]
        for w in words:
            # Character offsets into the Python string (the command's are UTF-8 bytes).
            assert text[w["start"] : w["end"]] == w["word"]
    assert [w["word"] for w in got[3]][:2] == ["naïve", "café"]


def test_sparse_terms_equal_the_commands(cli):
    model = tiny("bert-splade")
    splade = switchyard.SparseEncoder(model)
    got = splade.encode(TEXTS)
    lines = cli(["embed", "--model", model, *TEXTS], "")
    for terms, line in zip(got, lines):
        want = {
            t["token"] if t["token"] is not None else t["id"]: t["weight"] for t in line["sparse"]
        }
        assert list(terms) == list(want)
        assert [np.float32(w) for w in terms.values()] == [np.float32(w) for w in want.values()]
    ids = splade.encode(TEXTS[0], return_ids=True)
    assert list(ids.keys()) == [t["id"] for t in lines[0]["sparse"]]
    # A prompt goes before each text, as the command's --prompt puts it.
    prompted = cli(["embed", "--model", model, "--prompt", "the sea ", *TEXTS], "")
    for terms, line in zip(splade.encode(TEXTS, prompt="the sea "), prompted):
        keys = [t["token"] if t["token"] is not None else t["id"] for t in line["sparse"]]
        assert list(terms) == keys
    assert splade.encode(TEXTS, prompt="the sea ") != got


def test_devices_lists_flex_as_available():
    listed = switchyard.devices()
    flex = [d for d in listed if d["device"] == "flex"]
    assert flex and flex[0]["available"] and "computes in" in flex[0]["status"]
    assert all(set(d) == {"device", "available", "status"} for d in listed)


def test_dtype_auto_is_the_default_and_f32_on_flex(minilm):
    default = switchyard.Embedder(minilm).encode(TEXTS)
    assert np.array_equal(default, switchyard.Embedder(minilm, dtype="auto").encode(TEXTS))
    assert np.array_equal(default, switchyard.Embedder(minilm, dtype="f32").encode(TEXTS))


def test_int8_stays_as_close_as_docs_say(minilm, minilm_expected):
    got = switchyard.Embedder(minilm, dtype="int8").encode(minilm_expected["sentences"])
    want = np.array(minilm_expected["embeddings"], dtype=np.float32)
    cosines = np.sum(got * want, axis=1)  # both unit length
    # docs/benchmarks.md: int8 keeps a cosine of 0.9857 to 0.998 on these sentences.
    assert cosines.min() >= 0.985 and cosines.max() < 1.0 - 1e-4, cosines


def test_max_seq_length_truncates_inputs():
    full = switchyard.Embedder(tiny("bert"))
    short = switchyard.Embedder(tiny("bert"), max_seq_length=5)
    assert short.max_seq_length == 5 and full.max_seq_length > 5
    text = "cats sat on mats " * 20
    assert not np.array_equal(short.encode(text), full.encode(text))
    # What lies past the fifth token no longer matters.
    assert np.array_equal(short.encode(text), short.encode(text + " the sea"))
    with pytest.raises(switchyard.SwitchyardError, match="a maximum length of 1 tokens"):
        switchyard.Embedder(tiny("bert"), max_seq_length=1)
