"""Reader of NLTK corpora (``nltk_data/corpora/<name>.zip``, read in place by NLTK's corpus readers).

``nltk.data.path`` gets the data folder prepended (once), then ``nltk.corpus.<name>`` reads the zip
directly. The corpora we read, one document unit each (``corpora=`` picks some; default all, in
this order):

============= =============================== ================= ===================================
corpus        document                        domain            label
============= =============================== ================= ===================================
brown         one file (~2,000 words)         ``brown``         genre (news, fiction, humor, ...)
movie_reviews one review                      ``reviews``       pos / neg
webtext       one file (a forum, a script...) ``web``           file (firefox, grail, wine, ...)
nps_chat      one chat session (~700 posts)   ``chat``          room (teens, 20s, 30s, 40s, adults)
qc            one question                    ``questions``     coarse class (DESC, ENTY, HUM, ...)
treebank      one WSJ file                    ``wsj``           ``treebank``
state_union   one address                     ``speeches``      ``state_union``
inaugural     one address                     ``speeches``      ``inaugural``
============= =============================== ================= ===================================

Text: brown and treebank come tokenized (space-separated tokens, one sentence a line; treebank's
empty elements -- traces such as ``*T*-1``, tag ``-NONE-`` -- are removed); movie_reviews is
lower-cased and tokenized in the source (one sentence a line); webtext, state_union and inaugural are
raw text, one line per source line; nps_chat keeps the posts' text (one post a line) and drops the
``System`` posts (JOIN / PART); qc is the question as given (tokenized). ``doc_id =
"<corpus>/<fileid without extension>"`` (qc: ``qc/<train|test>-<n>``), ``meta["corpus"]`` = the NLTK
corpus name (plus ``fine`` = fine class and ``split`` for qc).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import check_choices, join_lines, reader

NLTK_CORPORA = ("brown", "movie_reviews", "webtext", "nps_chat", "qc", "treebank", "state_union", "inaugural")
NLTK_DOMAIN_OF = {
    "brown": "brown",
    "movie_reviews": "reviews",
    "webtext": "web",
    "nps_chat": "chat",
    "qc": "questions",
    "treebank": "wsj",
    "state_union": "speeches",
    "inaugural": "speeches",
}


def _use_data_dir(root: Path) -> None:
    import nltk

    if str(root) not in nltk.data.path:
        nltk.data.path.insert(0, str(root))


def _stem(fileid: str) -> str:
    return fileid.rsplit(".", 1)[0]


def _document(corpus: str, doc_id: str, text: str, label: str, **meta) -> Document:
    return Document(doc_id, text, domain=NLTK_DOMAIN_OF[corpus], label=label, meta={"corpus": corpus, **meta})


def _brown(nltk_corpus) -> Iterator[Document]:
    reader = nltk_corpus.brown
    for fileid in reader.fileids():
        text = "\n".join(" ".join(sentence) for sentence in reader.sents(fileid))
        yield _document("brown", f"brown/{fileid}", text, reader.categories(fileid)[0])


def _movie_reviews(nltk_corpus) -> Iterator[Document]:
    reader = nltk_corpus.movie_reviews
    for fileid in reader.fileids():
        yield _document("movie_reviews", f"movie_reviews/{_stem(fileid)}", join_lines(reader.raw(fileid).split("\n")),
                        reader.categories(fileid)[0])


def _raw_files(nltk_corpus, corpus: str, label_from_file: bool) -> Iterator[Document]:
    reader = getattr(nltk_corpus, corpus)
    for fileid in reader.fileids():
        text = join_lines(reader.raw(fileid).split("\n"))
        yield _document(corpus, f"{corpus}/{_stem(fileid)}", text, _stem(fileid) if label_from_file else corpus)


def _nps_chat(nltk_corpus) -> Iterator[Document]:
    reader = nltk_corpus.nps_chat
    for fileid in reader.fileids():
        posts = [post.text or "" for post in reader.xml_posts(fileid) if post.get("class") != "System"]
        room = _stem(fileid).split("_")[0].split("-")[-1]  # "10-19-20s_706posts" -> "20s"
        yield _document("nps_chat", f"nps_chat/{_stem(fileid)}", join_lines(posts), room)


def _qc(nltk_corpus) -> Iterator[Document]:
    reader = nltk_corpus.qc
    for fileid in reader.fileids():
        split = _stem(fileid)
        for number, (fine, question) in enumerate(reader.tuples(fileid), start=1):
            yield _document("qc", f"qc/{split}-{number:05d}", question.strip(), fine.split(":")[0],
                            fine=fine, split=split)


def _treebank(nltk_corpus) -> Iterator[Document]:
    reader = nltk_corpus.treebank
    for fileid in reader.fileids():
        sentences = [" ".join(word for word, tag in sentence if tag != "-NONE-")
                     for sentence in reader.tagged_sents(fileid)]
        yield _document("treebank", f"treebank/{_stem(fileid)}", join_lines(sentences), "treebank")


@reader
def read_nltk_data(root: Path, corpora: str | Iterable[str] | None = None) -> Iterator[Document]:
    """Documents of the chosen NLTK corpora (see the module docstring for units and labels)."""
    chosen = check_choices("corpora", corpora, NLTK_CORPORA)
    _use_data_dir(root)
    import nltk.corpus as nltk_corpus

    sources = {
        "brown": lambda: _brown(nltk_corpus),
        "movie_reviews": lambda: _movie_reviews(nltk_corpus),
        "webtext": lambda: _raw_files(nltk_corpus, "webtext", label_from_file=True),
        "nps_chat": lambda: _nps_chat(nltk_corpus),
        "qc": lambda: _qc(nltk_corpus),
        "treebank": lambda: _treebank(nltk_corpus),
        "state_union": lambda: _raw_files(nltk_corpus, "state_union", label_from_file=False),
        "inaugural": lambda: _raw_files(nltk_corpus, "inaugural", label_from_file=False),
    }
    for corpus in chosen:
        for document in sources[corpus]():
            if document.text:
                yield document
