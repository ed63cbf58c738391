"""Two probes of the CTRL paper that go beyond one domain code: code-mixing (their Table 5) and link
codes (their Table 3), measured on our model.

- **Code-mixing** (:func:`code_mixing_table`). A composite code puts another domain's template after a
  domain code (``r/Sports English:`` + ``The team won the game ; German:``; ``codes.check_secondary``).
  Training never pairs a code with another domain's template, so the question is what the model keeps.
  Per generation we ask two things:

  - *template kept?* ``question`` (``Q:``): the continuation's first line holds a ``?`` (the question is
    completed on its line, as every TREC question is); ``translation`` (``English: ... ; German:``): the
    continuation's first line is German by a language classifier (:func:`language_classifier`: the
    study's TF-IDF + logistic-regression pipeline, ``study.train_domain_classifier``, fitted on Multi30k
    English vs German sentences). Other templates (``Rating:``, ``Title:``) have no check of their own
    (NaN): what they should produce is the domain's text itself.
  - *domain kept?* The study's held-out domain classifier (``study.train_domain_classifier`` on real
    held-out text) applied to the continuation, its choice restricted to the codes other than the
    template's own domain(s) (``codes.template_owners``: Translation for ``English:``, Questions for
    ``Q:``): the template's format is expected, so the question is whether, among the remaining domains,
    the domain code's one is the most likely. A German continuation shares few features with our
    English-only domain text, so this is a weak test for the translation template; we report it anyway.

  Reference rows run each template under its own domain (``Translation English:``, ``Questions Q:``),
  so a template-kept rate is read against what the model does with the template where it learnt it.
- **Link codes** (:func:`link_probe`): under the ``Links`` code the prompt is a URL followed by a line
  break, as in training (``codes.link_url``). A probe keeps the URL's path and changes one part (the
  date, the Reuters topic, the BBC category, the subreddit). Decoding is greedy with the paper's
  penalty (θ = 1.2, their Table 3 setting), so two variants differ only because their URLs differ.
  Measured: the word overlap (Jaccard of the continuations' lower-cased word sets) between each
  variant and the others of its probe (1: the URL part was ignored; near 0: a different text), whether
  the continuation names the changed value (``mentions``: an alphabetic part of the value, e.g.
  ``grain``, appears in it; NaN for dates), and, given a classifier (e.g. one fitted on BBC articles by
  category), whether the continuation is classified as the variant's value.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from lmstudy.ctrl.codes import secondary_kind, template_owners
from lmstudy.ctrl.generation import generate_codes, tokenizer_codes
from lmstudy.ctrl.sampling import SamplingConfig

GERMAN, ENGLISH = "German", "English"
TABLE3_DECODING = SamplingConfig(greedy=True, penalty="ctrl", theta=1.2)


# --------------------------------------------------------------------------------------------
# code-mixing


@dataclass(frozen=True)
class MixingProbe:
    """One code-mixed generation: a domain code, another domain's template and the prompt after it."""

    domain: str  # a domain code, e.g. "r/Sports"
    template: str  # a secondary code of another domain, e.g. "English:" or "Q:"
    prompt: str  # what follows the template, e.g. "The team won the game ; German:"

    @property
    def code(self) -> str:
        """The composite code, e.g. ``r/Sports English:``."""
        return f"{self.domain} {self.template}"


MIXING_PROBES = (
    MixingProbe("r/Sports", "English:", "The team won the game last night ; German:"),
    MixingProbe("Reviews", "English:", "The film was wonderful ; German:"),
    MixingProbe("Wikipedia", "English:", "The city is the capital of the region ; German:"),
    MixingProbe("r/worldnews", "English:", "The president met the minister ; German:"),
    MixingProbe("Wikipedia", "Q:", "What"),
    MixingProbe("Reviews", "Q:", "Why"),
    MixingProbe("r/Sports", "Q:", "Who"),
    MixingProbe("r/television", "Q:", "How"),
)


def language_classifier(sentences: int = 1000, seed: int = 0):
    """An English-vs-German classifier (labels :data:`ENGLISH`, :data:`GERMAN`) fitted on the first
    ``sentences`` Multi30k training sentences of each language (``study.train_domain_classifier``)."""
    from lmstudy.ctrl.study import train_domain_classifier
    from lmstudy.data import iter_documents

    texts = {ENGLISH: [d.text for d in iter_documents("multi30k", split="train", languages="en", limit=sentences)],
             GERMAN: [d.text for d in iter_documents("multi30k", split="train", languages="de", limit=sentences)]}
    return train_domain_classifier(texts, seed=seed)


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0].strip()


def template_kept(kind: str, continuation: str, languages=None) -> float:
    """1.0 / 0.0: did the continuation keep the template of ``kind`` (module docstring)? NaN: no check
    for this kind (or no language classifier for ``translation``)."""
    first = _first_line(continuation)
    if kind == "question":
        return float("?" in first)
    if kind == "translation" and languages is not None:
        return float(bool(first) and languages.predict([first])[0] == GERMAN)
    return float("nan")


def kept_domain(classifier, continuation: str, exclude: Sequence[str]) -> str | None:
    """The classifier's most likely domain of ``continuation`` among its classes minus ``exclude``;
    None for an empty continuation."""
    if not continuation.strip():
        return None
    probabilities = classifier.predict_proba([continuation.strip()])[0]
    ranked = sorted(zip(classifier.classes_, probabilities), key=lambda pair: -pair[1])
    return next((str(label) for label, _ in ranked if label not in exclude), None)


def code_mixing_table(model, tokenizer, classifier, probes: Sequence[MixingProbe] = MIXING_PROBES, languages=None,
                      sampling: SamplingConfig = SamplingConfig(top_p=0.9), max_new_tokens: int = 30,
                      seeds: Sequence[int] = (0, 1, 2), reference: bool = True) -> pd.DataFrame:
    """Generate every probe (those whose domain the model knows) under each seed; one row per generation:
    ``domain, template, kind, code, prompt, seed, continuation, template_kept, domain_predicted, domain_kept``.
    ``classifier``: the study's domain classifier; ``languages``: :func:`language_classifier` (or None).
    ``reference``: add each template under its own domain code (``mixed`` False) as the baseline."""
    known = set(tokenizer_codes(tokenizer))
    probes = [probe for probe in probes if probe.domain in known]
    if reference:
        owners = {}
        for probe in probes:
            kind = secondary_kind(probe.template)
            for owner in template_owners(kind) if kind else []:
                if owner in known and owner != probe.domain:
                    owners.setdefault((owner, probe.template), MixingProbe(owner, probe.template, probe.prompt))
        probes = probes + list(owners.values())
    if not probes:
        raise ValueError(f"none of the probes' domain codes is a code of this model ({', '.join(sorted(known))})")
    rows = []
    for probe in probes:
        kind = secondary_kind(probe.template) or ""
        exclude = [owner for owner in template_owners(kind) if owner != probe.domain]
        for seed in seeds:
            generation = generate_codes(model, tokenizer, probe.prompt, [probe.code], sampling, max_new_tokens, seed)[0]
            predicted = kept_domain(classifier, generation.text, exclude)
            rows.append({"domain": probe.domain, "template": probe.template, "kind": kind,
                         "mixed": probe.domain not in template_owners(kind), "code": probe.code,
                         "prompt": probe.prompt, "seed": seed, "continuation": generation.text,
                         "template_kept": template_kept(kind, generation.text, languages),
                         "domain_predicted": predicted,
                         "domain_kept": (float(predicted == probe.domain) if probe.domain in classifier.classes_
                                         else float("nan"))})
    return pd.DataFrame(rows)


def code_mixing_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (domain, template): generations, share with the template kept, share with the domain kept."""
    return (table.groupby(["domain", "template", "mixed"], sort=False)
            .agg(generations=("seed", "size"), template_kept=("template_kept", "mean"),
                 domain_kept=("domain_kept", "mean"))
            .reset_index())


# --------------------------------------------------------------------------------------------
# link codes (Table 3)


@dataclass(frozen=True)
class LinkProbe:
    """One URL path with one part varied: ``url`` has a ``{}`` where each of ``values`` goes."""

    name: str
    url: str
    values: tuple[str, ...]

    def urls(self) -> list[str]:
        """The URL of each value."""
        return [self.url.format(value) for value in self.values]


LINK_PROBES = (
    LinkProbe("Reuters date", "https://www.reuters.com/{}/crude/oil-prices-rise-after-opec-meeting",
              ("1987/02/26", "1987/06/15", "1987/10/19")),
    LinkProbe("Reuters topic", "https://www.reuters.com/1987/03/12/{}/prices-rise-after-talks",
              ("crude", "grain", "money-fx", "acq")),
    LinkProbe("BBC category", "https://news.bbc.co.uk/{}/new-record-set-this-year",
              ("business", "entertainment", "politics", "sport", "tech")),
    LinkProbe("subreddit", "https://www.reddit.com/r/{}/comments/what-do-you-think-of-this",
              ("movies", "gaming", "books", "worldnews")),
)


def _words(text: str) -> set[str]:
    return set(re.findall(r"\w+", text.lower()))


def word_overlap(a: str, b: str) -> float:
    """Jaccard overlap of two texts' lower-cased word sets (1.0 for two empty texts)."""
    first, second = _words(a), _words(b)
    return len(first & second) / len(first | second) if first | second else 1.0


MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
          "november", "december")


def mentions(value: str, text: str) -> float:
    """1.0 / 0.0: the continuation names ``value``: an alphabetic part (3+ letters) of it appears in ``text``
    (``grain``, ``money``); for a date ``YYYY/MM/DD``, its month's name (``February``). NaN when a value has
    neither."""
    date = re.fullmatch(r"(\d{4})/(\d{2})/(\d{2})", value.strip())
    if date:
        month = MONTHS[int(date.group(2)) - 1]
        return float(month in _words(text) or month[:3] in _words(text))
    parts = [part for part in re.findall(r"[a-z]+", value.lower()) if len(part) >= 3]
    if not parts:
        return float("nan")
    return float(any(part in _words(text) for part in parts))


def link_probe(model, tokenizer, probes: Sequence[LinkProbe] = LINK_PROBES, code: str = "Links",
               sampling: SamplingConfig = TABLE3_DECODING, max_new_tokens: int = 40, seed: int = 0,
               classifiers: Mapping[str, object] | None = None, seeds: Sequence[int] | None = None) -> pd.DataFrame:
    """The Table 3 probe: one row per (probe, value, seed): ``probe, value, url, seed, continuation, overlap`` (mean
    word overlap with the probe's other values under the same seed), ``mentions``, and with
    ``classifiers[probe.name]`` the ``predicted`` label of the continuation and ``matches`` (predicted == value).
    ``seeds`` (default ``[seed]``): the sampling seeds, for a sampling ``sampling`` (greedy decoding gives one
    generation whatever the seed)."""
    rows = []
    for probe in probes:
        if len(probe.values) < 2:
            raise ValueError(f"link probe {probe.name!r} needs at least two values to compare, got {probe.values}")
        classifier = (classifiers or {}).get(probe.name)
        for one_seed in (seeds if seeds is not None else [seed]):
            texts = [generate_codes(model, tokenizer, url + "\n", [code], sampling, max_new_tokens, one_seed)[0].text
                     for url in probe.urls()]
            for k, (value, url, text) in enumerate(zip(probe.values, probe.urls(), texts)):
                others = [word_overlap(text, other) for j, other in enumerate(texts) if j != k]
                row = {"probe": probe.name, "value": value, "url": url, "seed": one_seed, "continuation": text,
                       "overlap": sum(others) / len(others), "mentions": mentions(value, text)}
                if classifier is not None:
                    row["predicted"] = str(classifier.predict([text.strip() or "-"])[0])
                    row["matches"] = row["predicted"] == value
                rows.append(row)
    return pd.DataFrame(rows)


def link_probe_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per probe: values, distinct continuations, mean pairwise word overlap, share naming their value."""
    def pairwise(texts: pd.Series) -> float:
        pairs = list(itertools.combinations(texts.tolist(), 2))
        return sum(word_overlap(a, b) for a, b in pairs) / len(pairs) if pairs else float("nan")

    return (table.groupby("probe", sort=False)
            .agg(values=("value", "size"), distinct=("continuation", "nunique"),
                 overlap=("continuation", pairwise), mentions=("mentions", "mean"))
            .reset_index())


__all__ = ["ENGLISH", "GERMAN", "LINK_PROBES", "LinkProbe", "MIXING_PROBES", "MixingProbe", "TABLE3_DECODING",
           "code_mixing_summary", "code_mixing_table", "kept_domain", "language_classifier", "link_probe",
           "link_probe_summary", "mentions", "template_kept", "word_overlap"]
