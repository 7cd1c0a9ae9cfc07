"""Synthetic rows of a config's shapes: what packed pretraining gives the model, for
benchmarks and tests that need a batch but no corpus."""
import numpy as np


def random_batch(config, seed=0, documents: int = 4):
    """Random full rows; with data.document_mask, each row packs `documents` equal
    documents (document ids, positions restarting when data.restart_positions), so the
    attention backends see what packed pretraining gives them."""
    rng = np.random.default_rng(seed)
    b, t = config.train.batch_size, config.data.seq_len
    ids = rng.integers(5, config.model.vocab_size, size=(b, t)).astype(np.int32)
    ids[:, 0] = 2
    positions = np.broadcast_to(np.arange(t, dtype=np.int32), (b, t)).copy()
    batch = {"input_ids": ids, "attention_mask": np.ones((b, t), np.int32),
             "segment_ids": np.zeros((b, t), np.int32), "positions": positions}
    if config.data.get("document_mask", False):
        doc = np.minimum(np.arange(t) * documents // t, documents - 1).astype(np.int32)
        batch["document_ids"] = np.broadcast_to(doc + 1, (b, t)).copy()
        if config.data.get("restart_positions", False):
            starts = np.searchsorted(doc, np.arange(documents))
            batch["positions"] = np.broadcast_to(
                (np.arange(t) - starts[doc]).astype(np.int32), (b, t)).copy()
    return batch
