"""fetch: downloads from a local HTTP server on 127.0.0.1 (a thread, shut down after each test)."""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import lzma
import os
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lmstudy.data import catalogue
from lmstudy.data import cli as data_cli
from lmstudy.data.catalogue import CONCAT_XZ, REPACKED, Corpus, Source, verify_corpus
from lmstudy.data.fetch import BASE_URL_ENV, ChecksumMismatchError, FetchError, fetch

CONTENT = b"".join(b"line %d of a tiny corpus file\n" % i for i in range(2000))  # ~60 KB: several chunks


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class RangeRequestHandler(SimpleHTTPRequestHandler):
    """Serves files of a folder; honours ``Range: bytes=N-`` unless the server says otherwise."""

    def do_GET(self):
        self.server.requests.append((self.path, self.headers.get("Range")))
        path = Path(self.translate_path(self.path))
        if not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        wanted = self.headers.get("Range")
        if wanted and self.server.honour_range:
            start = int(wanted.removeprefix("bytes=").split("-")[0])
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = data[start:]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.server.cut_after is not None:  # a connection that drops mid-file
            self.wfile.write(body[: self.server.cut_after])
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args):  # keep test output clean
        pass


@dataclasses.dataclass
class Server:
    url: str
    www: Path
    httpd: ThreadingHTTPServer

    def put(self, relative: str, data: bytes) -> str:
        path = self.www / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return f"{self.url}/{relative}"

    @property
    def requests(self) -> list[tuple[str, str | None]]:
        return self.httpd.requests


@pytest.fixture
def server(tmp_path):
    www = tmp_path / "www"
    www.mkdir()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(RangeRequestHandler, directory=str(www)))
    httpd.requests, httpd.honour_range, httpd.cut_after = [], True, None
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield Server(f"http://127.0.0.1:{httpd.server_address[1]}", www, httpd)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


@pytest.fixture
def dest(tmp_path, monkeypatch):
    monkeypatch.delenv(BASE_URL_ENV, raising=False)
    return tmp_path / "data"


def tiny_corpus(sources: dict[str, Source], sha: dict[str, str]) -> Corpus:
    return Corpus(
        name="tiny", description="test corpus", files=tuple(sources), licence="CC0", origin="test/tiny @ 0",
        sources=sources, manifest_words=0, word_unit="words", word_rule="-", word_counter=lambda root: {},
        sha256=sha,
    )


def copy_corpus(url: str, data: bytes = CONTENT) -> Corpus:
    return tiny_corpus({"a.txt": Source((url,))}, {"a.txt": sha256(data)})


def leftovers(folder: Path) -> list[str]:
    return sorted(path.name for path in folder.rglob("*")) if folder.exists() else []


def test_good_file_is_installed_atomically(server, dest, monkeypatch):
    corpus = copy_corpus(server.put("origin/a.txt", CONTENT))
    replaced = []
    real_replace = os.replace
    monkeypatch.setattr(os, "replace", lambda src, dst: (replaced.append((Path(src), Path(dst))),
                                                         real_replace(src, dst)))
    folder = fetch(corpus, dest_root=dest)
    assert folder == dest / "tiny"
    assert (folder / "a.txt").read_bytes() == CONTENT
    assert replaced == [(folder / "a.txt.part", folder / "a.txt")]  # streamed to .part, then one rename
    assert leftovers(folder) == ["a.txt"]
    assert verify_corpus(corpus, root=dest) == []

    server.requests.clear()
    fetch(corpus, dest_root=dest)  # already there and good: no download
    assert server.requests == []


def test_corrupted_download_raises_with_both_hashes_and_leaves_nothing(server, dest):
    corpus = copy_corpus(server.put("origin/a.txt", CONTENT[:-1] + b"!"))
    with pytest.raises(ChecksumMismatchError) as error:
        fetch(corpus, dest_root=dest)
    message = str(error.value)
    assert "a.txt" in message
    assert sha256(CONTENT) in message and sha256(CONTENT[:-1] + b"!") in message
    assert leftovers(dest / "tiny") == []


def test_interrupted_part_resumes_with_a_range_request(server, dest):
    corpus = copy_corpus(server.put("origin/a.txt", CONTENT))
    part = dest / "tiny" / "a.txt.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(CONTENT[:25_000])  # what an interrupted run left
    fetch(corpus, dest_root=dest)
    assert server.requests == [("/origin/a.txt", "bytes=25000-")]
    assert (dest / "tiny" / "a.txt").read_bytes() == CONTENT
    assert not part.exists()


def test_dropped_connection_keeps_the_part_and_the_next_run_resumes(server, dest):
    corpus = copy_corpus(server.put("origin/a.txt", CONTENT))
    server.httpd.cut_after = 20_000
    with pytest.raises(FetchError, match="resume"):
        fetch(corpus, dest_root=dest)
    part = dest / "tiny" / "a.txt.part"
    assert part.read_bytes() == CONTENT[:20_000] and not (dest / "tiny" / "a.txt").exists()

    server.httpd.cut_after = None
    fetch(corpus, dest_root=dest)
    assert server.requests[-1] == ("/origin/a.txt", "bytes=20000-")
    assert (dest / "tiny" / "a.txt").read_bytes() == CONTENT and not part.exists()


def test_complete_part_is_checked_and_installed(server, dest):
    corpus = copy_corpus(server.put("origin/a.txt", CONTENT))
    part = dest / "tiny" / "a.txt.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(CONTENT)  # interrupted after the last byte, before the rename
    fetch(corpus, dest_root=dest)  # the server answers 416 to bytes=<size>-
    assert (dest / "tiny" / "a.txt").read_bytes() == CONTENT and not part.exists()


def test_server_ignoring_range_restarts_the_download(server, dest):
    server.httpd.honour_range = False
    corpus = copy_corpus(server.put("origin/a.txt", CONTENT))
    part = dest / "tiny" / "a.txt.part"
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * 1000)  # wrong bytes: appending the rest to them would fail the checksum
    fetch(corpus, dest_root=dest)
    assert server.requests == [("/origin/a.txt", "bytes=1000-")]
    assert (dest / "tiny" / "a.txt").read_bytes() == CONTENT


def test_missing_source_is_a_clear_error(server, dest):
    corpus = copy_corpus(f"{server.url}/origin/nothing.txt")
    with pytest.raises(FetchError, match="404"):
        fetch(corpus, dest_root=dest)
    assert leftovers(dest / "tiny") == []


def test_mirror_serves_the_layout_and_notes(server, dest, monkeypatch):
    notes = b"where tiny comes from\n"
    corpus = dataclasses.replace(copy_corpus("https://example.invalid/never-used"),
                                 sha256={"a.txt": sha256(CONTENT), "SOURCE.txt": sha256(notes)})
    server.put("tiny/a.txt", CONTENT)
    server.put("tiny/SOURCE.txt", notes)
    monkeypatch.setenv(BASE_URL_ENV, server.url)  # the environment variable is enough
    fetch(corpus, dest_root=dest)
    assert leftovers(dest / "tiny") == ["SOURCE.txt", "a.txt"]
    assert (dest / "tiny" / "SOURCE.txt").read_bytes() == notes


def test_mirror_gz_is_checked_by_its_inner_sha256_and_written_as_xz(server, dest):
    inner = CONTENT * 3  # stands for the tar inside aclImdb.tar.gz
    source = Source(("https://github.com/test/tiny/archive/0.tar.gz",), REPACKED, sha256(inner))
    corpus = tiny_corpus({"t.tar.xz": source}, {"t.tar.xz": sha256(b"the shared copy's xz bytes")})
    server.put("tiny/t.tar.gz", gzip.compress(inner))  # the mirror has only the original .gz
    fetch(corpus, dest_root=dest, base_url=server.url)
    target = dest / "tiny" / "t.tar.xz"
    assert lzma.decompress(target.read_bytes()) == inner
    assert leftovers(dest / "tiny") == ["t.tar.xz"]
    assert verify_corpus(corpus, root=dest) == []  # outer hash differs, inner stream matches

    target.unlink()
    server.put("tiny/t.tar.gz", gzip.compress(inner + b"tampered"))
    with pytest.raises(ChecksumMismatchError) as error:
        fetch(corpus, dest_root=dest, base_url=server.url)
    assert sha256(inner) in str(error.value) and sha256(inner + b"tampered") in str(error.value)
    assert leftovers(dest / "tiny") == []


def test_repacked_file_without_a_mirror_says_how_to_get_it(server, dest):
    source = Source((f"{server.url}/archive.tar.gz",), REPACKED, sha256(b"tar"), "a tar made for shared/data")
    corpus = tiny_corpus({"t.tar.xz": source}, {"t.tar.xz": sha256(b"xz")})
    with pytest.raises(FetchError, match="--base-url"):
        fetch(corpus, dest_root=dest)
    assert server.requests == []  # nothing downloaded that could never pass the check


def test_concatenated_parts_become_one_checked_xz(server, dest):
    halves = CONTENT[:30_000], CONTENT[30_000:]
    urls = tuple(server.put(f"origin/wiki_{i:02d}", half) for i, half in enumerate(halves))
    source = Source(urls, CONCAT_XZ, sha256(CONTENT))
    corpus = tiny_corpus({"shard.txt.xz": source}, {"shard.txt.xz": sha256(b"shared xz bytes")})
    fetch(corpus, dest_root=dest)
    assert lzma.decompress((dest / "tiny" / "shard.txt.xz").read_bytes()) == CONTENT
    assert leftovers(dest / "tiny") == ["shard.txt.xz"]  # parts folder removed

    wrong = Source(urls, CONCAT_XZ, sha256(CONTENT + b"more"))
    corpus = tiny_corpus({"other.txt.xz": wrong}, {"other.txt.xz": sha256(b"x")})
    with pytest.raises(ChecksumMismatchError):
        fetch(corpus, dest_root=dest)
    assert leftovers(dest / "tiny") == ["shard.txt.xz"]


def test_data_fetch_command(server, dest, monkeypatch, capsys):
    corpus = copy_corpus(server.put("origin/a.txt", CONTENT))
    monkeypatch.setitem(catalogue.CATALOGUE, "tiny", corpus)
    assert data_cli.main(["fetch", "tiny", "--dest", str(dest)]) == 0
    assert "tiny: ok" in capsys.readouterr().out
    assert (dest / "tiny" / "a.txt").read_bytes() == CONTENT

    (dest / "tiny" / "a.txt").unlink()
    server.put("origin/a.txt", b"changed upstream\n")
    assert data_cli.main(["fetch", "tiny", "--dest", str(dest)]) == 1
    assert sha256(CONTENT) in capsys.readouterr().err
    assert data_cli.main(["fetch", "no-such-corpus"]) == 2
