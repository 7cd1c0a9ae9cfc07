"""Extractive QA (SQuAD v1.1): start/end logits over context windows, EM and F1."""
import jax
import jax.numpy as jnp
import numpy as np

from encoder.tasks import readers as tasks_lib
from encoder.eval import metrics as metrics_lib
from encoder.tasks.base import Task, weighted_mean
from encoder.model import heads, models


class QA(Task):
    name = "qa"
    primary_metric = "f1"
    model_cls = models.SpanExtractor

    @property
    def num_labels(self) -> int:
        return 2

    def featurize(self, examples):
        return tasks_lib.featurize_qa(examples, self.tokenizer, self.config.data.max_seq_len,
                                      self.config.data.doc_stride)

    def loss(self, out, batch):
        # [CLS] is allowed: it is where a window without the answer points.
        allowed = batch["context_mask"].astype(bool).at[:, 0].set(True)
        total = 0.0
        for logits, target in ((out[0], batch["start_positions"]),
                               (out[1], batch["end_positions"])):
            logp = jax.nn.log_softmax(jnp.where(allowed, logits.astype(jnp.float32), -1e9))
            nll = -jnp.take_along_axis(logp, target[:, None], -1)[:, 0]
            total = total + weighted_mean(nll, batch["weight"])
        return total / 2

    def score(self, out, examples, arrays, meta):
        start, end = out
        s, e, score = heads.best_span(jnp.asarray(start), jnp.asarray(end),
                                      jnp.asarray(arrays["context_mask"].astype(bool)),
                                      self.config.data.max_answer_tokens)
        s, e, score = np.asarray(s), np.asarray(e), np.asarray(score)
        best: dict[int, tuple[float, str]] = {}
        for w, info in enumerate(meta):
            text = tasks_lib.qa_answer_text(examples[info["example"]], info, int(s[w]), int(e[w]))
            if info["example"] not in best or score[w] > best[info["example"]][0]:
                best[info["example"]] = (float(score[w]), text)
        answers = [best.get(i, (0.0, ""))[1] for i in range(len(examples))]
        preds = [{"id": ex.get("id"), "answer": a} for ex, a in zip(examples, answers)]
        golds = [ex.get("answers") or [ex["answer_text"]] for ex in examples]
        return metrics_lib.squad_scores(answers, golds), preds
