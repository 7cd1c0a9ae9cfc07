"""The bag-of-words machinery every lexical baseline shares: one TF-IDF vectorizer.

TF-IDF is fitted on the training split only (vocabulary and IDF never see a dev or test
text). Each type's baselines are in its own file (encoder/tasks/<type>.py); the table of
methods and the command are encoder/tasks/baselines.py.
"""


def tfidf():
    """The one vectorizer of every bag-of-words baseline (L2-normalised rows)."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    return TfidfVectorizer(min_df=1, ngram_range=(1, 2), max_features=50_000)


def tfidf_encoder(fit_texts: list[str]):
    """texts -> [N, V] sparse unit TF-IDF vectors, the vocabulary and IDF from fit_texts."""
    return tfidf().fit(fit_texts).transform


def _texts(examples):
    return [ex.get("text", ex.get("text_a", "")) for ex in examples]


def bow_features(train, splits):
    """(x_train, [x_split, ...]): TF-IDF rows, a pair's as [a, b, |a - b|, a * b]."""
    from scipy.sparse import hstack
    vec = tfidf()
    if "text_b" in train[0]:
        vec.fit([ex["text_a"] for ex in train] + [ex["text_b"] for ex in train])

        def feats(exs):
            a = vec.transform([ex["text_a"] for ex in exs])
            b = vec.transform([ex["text_b"] for ex in exs])
            return hstack([a, b, abs(a - b), a.multiply(b)]).tocsr()
        return feats(train), [feats(s) for s in splits]
    return vec.fit_transform(_texts(train)), [vec.transform(_texts(s)) for s in splits]
