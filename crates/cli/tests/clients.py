"""Calls a running `switchyard serve` with HTTP clients nobody here wrote.

Usage: clients.py URL MODEL TEXT...

Prints one JSON object: the embeddings of the texts from the `openai` package
(`client.embeddings.create`), the same from `huggingface_hub`'s `InferenceClient`
(`feature_extraction`), and the cosine similarity of the first text to the others
(`sentence_similarity`). The test that runs this compares them with the CLI's.
"""

import json
import sys

import openai
from huggingface_hub import InferenceClient

url, model, texts = sys.argv[1], sys.argv[2], sys.argv[3:]

oa = openai.OpenAI(base_url=f"{url}/v1", api_key="unused")
response = oa.embeddings.create(model=model, input=texts)
by_openai = [d.embedding for d in sorted(response.data, key=lambda d: d.index)]

hub = InferenceClient(base_url=url)
by_hub = [hub.feature_extraction(t).ravel().tolist() for t in texts]
similarity = hub.sentence_similarity(texts[0], other_sentences=texts[1:])

print(json.dumps({
    "openai": by_openai,
    "openai_tokens": response.usage.prompt_tokens,
    "hub": by_hub,
    "similarity": similarity,
}))
