"""Corpus readers: one function per corpus turning its files into :class:`~lmstudy.data.documents.Document`.

``READERS[name](root, **options)`` streams the documents of corpus ``name`` (the folder name in the
data directory, see ``shared/data/MANIFEST.md``) from its folder ``root``. Use it through
``lmstudy.data.iter_documents(name, **options)``, which finds the folder and checks it is complete.

Every reader:

- yields ``Document(doc_id, text, domain, label, title, meta)``; ``doc_id`` is unique and stable
  within the corpus (split id lists refer to it); ``domain`` is ``DOMAIN_OF[name]`` (the NLTK
  reader's documents carry the domain of their NLTK corpus, see ``NLTK_DOMAIN_OF``);
- keeps the text's line structure (one paragraph / sentence / message a line, no blank lines) and
  removes markup only, never lower-cases or tokenises (see :mod:`.common`);
- accepts ``limit=N`` (the first N documents; stops reading there) and the options of its module
  (``split=`` for corpora with official splits, and the ones named below), and raises a clear error
  for a bad option value or a missing file;
- documents its corpus's format and our decisions in its module docstring.

========================= =============== ==================================== ======================
corpus                    module          document                             options
========================= =============== ==================================== ======================
ptb                       plain           a sentence (line)                    split
wikitext-2 / -2-raw       plain           an article                           split
lambada                   plain           a passage                            split, detokenized
wikipedia                 wikipedia       an article                           shards
imdb                      imdb            a review (label = rating)            split
reddit                    reddit          a conversation tree (label = sub)    subreddits
irc                       irc             50-message window / conversation     parts, unit, window,
                                                                               speakers
reuters21578, bbc_news    news            an article (label = topic)           split / topics
litbank                   litbank         a book, or ~N-word chunks            chunk_words
gum                       gum             a document (label = genre)           split, include_reddit
nltk_data                 nltk_corpora    per corpus (brown file, qc question) corpora
multi30k                  multi30k        a caption (label = language)         split, languages
gap_coreference           gap             an example                           split
wnut17_ner                wnut            a sentence (tokens, tags in meta)    split
========================= =============== ==================================== ======================

Coreference (the Entity-Transformer study): :func:`read_gum_coref` and :func:`read_litbank_coref`
yield :class:`CorefDocument` (tokens, sentences, POS, :class:`Mention` clusters, typed entities).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from lmstudy.data.documents import Document
from lmstudy.data.readers.coref import CorefDocument, Mention
from lmstudy.data.readers.gap import read_gap_coreference
from lmstudy.data.readers.gum import read_gum, read_gum_coref
from lmstudy.data.readers.imdb import read_imdb
from lmstudy.data.readers.irc import read_irc
from lmstudy.data.readers.litbank import read_litbank, read_litbank_coref
from lmstudy.data.readers.multi30k import read_multi30k
from lmstudy.data.readers.news import read_bbc_news, read_reuters21578
from lmstudy.data.readers.nltk_corpora import NLTK_DOMAIN_OF, read_nltk_data
from lmstudy.data.readers.plain import read_lambada, read_ptb, read_wikitext_2, read_wikitext_2_raw
from lmstudy.data.readers.reddit import read_reddit
from lmstudy.data.readers.wikipedia import read_wikipedia
from lmstudy.data.readers.wnut import read_wnut17_ner

READERS: dict[str, Callable[..., Iterator[Document]]] = {
    "ptb": read_ptb,
    "wikipedia": read_wikipedia,
    "imdb": read_imdb,
    "reddit": read_reddit,
    "irc": read_irc,
    "litbank": read_litbank,
    "reuters21578": read_reuters21578,
    "bbc_news": read_bbc_news,
    "wikitext-2": read_wikitext_2,
    "wikitext-2-raw": read_wikitext_2_raw,
    "lambada": read_lambada,
    "gum": read_gum,
    "nltk_data": read_nltk_data,
    "multi30k": read_multi30k,
    "gap_coreference": read_gap_coreference,
    "wnut17_ner": read_wnut17_ner,
}

# Corpus name -> the domain of its documents (nltk_data: see NLTK_DOMAIN_OF, one per NLTK corpus).
DOMAIN_OF: dict[str, str] = {
    "ptb": "ptb",
    "wikipedia": "wikipedia",
    "imdb": "imdb",
    "reddit": "reddit",
    "irc": "irc",
    "litbank": "books",
    "reuters21578": "news",
    "bbc_news": "news",
    "wikitext-2": "wikipedia",
    "wikitext-2-raw": "wikipedia",
    "lambada": "books",
    "gum": "gum",
    "nltk_data": "nltk",
    "multi30k": "captions",
    "gap_coreference": "wikipedia",
    "wnut17_ner": "social",
}

__all__ = [
    "DOMAIN_OF",
    "NLTK_DOMAIN_OF",
    "READERS",
    "CorefDocument",
    "Mention",
    "read_gum_coref",
    "read_litbank_coref",
    *sorted(f.__name__ for f in READERS.values()),
]
