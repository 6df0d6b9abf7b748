"""The Ray Data recipe on a local Ray cluster: every row embedded once, equal to one process,
and a stopped run resumed."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import ray

import switchyard
from switchyard.ray import EmbedBatches, embed_parquet


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def corpus(n: int):
    """Texts of varied lengths, each once, with ids."""
    words = "the quick brown fox jumps over a lazy dog while rain falls on quiet towns".split()
    return [
        (i, " ".join(words[(i * k) % len(words)] for k in range(1 + i % 23)) + f" #{i}")
        for i in range(n)
    ]


def embedded(dest) -> dict:
    table = pq.read_table(str(dest))
    ids = table.column("id").to_pylist()
    vectors = table.column("embedding").to_pylist()
    assert len(ids) == len(set(ids)), "a row was embedded twice"
    return {i: np.asarray(v, dtype=np.float32) for i, v in zip(ids, vectors)}


def test_two_actors_embed_every_row_once_as_one_process_does(cluster, minilm, tmp_path):
    rows = corpus(3000)
    source = tmp_path / "corpus"
    source.mkdir()
    # Three files, so the run is split into several blocks and both actors get work.
    for part in range(3):
        chunk = rows[part::3]
        pq.write_table(
            pa.table({"id": [i for i, _ in chunk], "text": [t for _, t in chunk]}),
            str(source / f"part-{part}.parquet"),
        )
    dest = tmp_path / "embeddings"

    # Two actors of one flex thread, each reserving half a CPU of the 2-CPU cluster: Ray Data's
    # read and write tasks need a CPU beside them, or the pipeline waits forever.
    run = dict(actors=2, threads=1, cpus_per_actor=0.5, batch_size=200)

    # A first run that stops part way: only the first file's rows.
    first = tmp_path / "first"
    first.mkdir()
    (first / "part-0.parquet").write_bytes((source / "part-0.parquet").read_bytes())
    assert embed_parquet(minilm, str(first), str(dest), **run) == 1000

    # Run again on the whole corpus: only what is missing is embedded.
    assert embed_parquet(minilm, str(source), str(dest), **run) == 2000
    assert embed_parquet(minilm, str(source), str(dest), **run) == 0

    got = embedded(dest)
    assert sorted(got) == [i for i, _ in rows]
    want = switchyard.Embedder(minilm).encode([t for _, t in rows])
    # Each text's vector depends on its own tokens only, whichever actor and batch ran it.
    worst = max(np.abs(got[i] - want[i]).max() for i, _ in rows)
    assert worst <= 1e-6, worst


def test_a_prompt_goes_before_every_row(cluster, minilm, tmp_path):
    rows = corpus(40)
    source = tmp_path / "corpus"
    source.mkdir()
    table = pa.table({"id": [i for i, _ in rows], "text": [t for _, t in rows]})
    pq.write_table(table, str(source / "part.parquet"))
    dest = tmp_path / "embeddings"
    run = dict(actors=1, threads=1, cpus_per_actor=0.5)
    assert embed_parquet(minilm, str(source), str(dest), prompt="query: ", **run) == 40

    got = embedded(dest)
    model = switchyard.Embedder(minilm)
    texts = [t for _, t in rows]
    want = model.encode(texts, prompt="query: ")
    assert not np.allclose(want, model.encode(texts)), "the prompt changes the embeddings"
    worst = max(np.abs(got[i] - want[i]).max() for i, _ in rows)
    assert worst <= 1e-6, worst
    # The class Ray runs takes the model's prompt by name too (all-MiniLM-L6-v2 names none).
    with pytest.raises(switchyard.SwitchyardError, match="no prompt named"):
        EmbedBatches(minilm, threads=1, prompt_name="query")({"text": np.array(texts[:1])})


def test_a_corpus_without_the_id_or_text_column_is_an_error(cluster, minilm, tmp_path):
    source = tmp_path / "corpus"
    source.mkdir()
    pq.write_table(pa.table({"body": ["a", "b"]}), str(source / "part.parquet"))
    with pytest.raises(KeyError, match="'id'"):
        embed_parquet(minilm, str(source), str(tmp_path / "out"))
    with pytest.raises(ValueError, match="actors"):
        embed_parquet(minilm, str(source), str(tmp_path / "out"), actors=0)
