"""Reader of the IRC disentanglement data (Kummerfeld et al. 2019; ``irc/irc_disentanglement_data.tar.xz``).

Format: ``data/<part>/<name>.{raw,ascii,tok,annotation}.txt``. Parts: ``train`` (153 samples of
#ubuntu days), ``dev`` (10), ``test`` (10), ``channel-two`` (#linux, Elsner & Charniak 2008) and
``new-domains`` (mediawiki, rust, stripe, ubuntu-meeting; ``.ascii.txt`` only). A log line is

    [09:57] <Agrajag> no                      <- a message: [time] <speaker> text
    === vtg [vertigo@route6.alumina.nl]  has joined #ubuntu      <- joins, quits, nick changes, /me
    rust 2018-05-29 [21:20:37] <talchas> ...  <- new-domains: channel and date first

and ``annotation.txt`` lines ``A B -`` link message B to message A (0-based line numbers; a
self-link starts a conversation). Each sample is ~1,000 lines of unannotated context followed by
~100-250 annotated lines (from line 1,000 on).

Messages: only ``<speaker> text`` lines are kept; every ``===`` line (joins, parts, quits, nick
changes, and the old logs' ``/me`` actions, which cannot be told apart from system lines reliably),
notices (``-nick:#chan-``) and relayed lines are dropped, as are timestamps. The text is
**speaker-free** by default: the speaker names are rare, mostly unique tokens that would swamp a
word vocabulary, and the addressee a message names (``topyli: try this``) stays in the text.
``speakers=True`` writes ``speaker: text`` lines instead. One message a line; IRC colour and other
control characters are removed.

Document unit (``unit=``):

- ``"window"`` (default): consecutive windows of ``window`` (default 50) messages of a log sample,
  over the whole sample. This uses all of the text (2.27M words of #ubuntu messages), which the
  Welch-style domain needs (a 1M-token train split plus a larger pretraining split); the gold
  conversations below cover only the annotated part, 30% of it (686k words). Windows keep the
  channel's real interleaved flow, which is what a language model of IRC sees.
  ``doc_id = "<part>/<name>/w<k>"``.
- ``"conversation"``: the gold disentangled conversations (connected components of the annotation
  links; a component that starts in the context keeps its linked context messages), each a document
  with its messages in log order: Welch et al.'s unit ("all of the automatically disentangled
  conversations"), here from the gold annotation. ``doc_id = "<part>/<name>/c<first line>"``.

``parts=`` (default train, dev, test: the #ubuntu data, the "Ubuntu IRC" of Welch et al.); of
``channel-two`` only the ``all`` file is read (the other files are subsets of it). ``label`` = channel
(``ubuntu``, ``linux``, ``rust``, ...), ``meta = {"part", "file", "messages"}`` (``file`` lets a split
keep the windows of one sample together), domain ``irc``. The archive is streamed once; a sample is
held in memory only until its files are complete.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from lmstudy.data.documents import Document
from lmstudy.data.readers.common import check_choice, check_choices, iter_tar, reader

PARTS = ("train", "dev", "test", "channel-two", "new-domains")
UNITS = ("window", "conversation")

# [hh:mm] or [hh:mm:ss], optionally preceded by "<channel> <date> " (new-domains), then <speaker> text.
_MESSAGE = re.compile(r"^(?:\S+ \d{4}-\d{2}-\d{2} )?\[\d{1,2}:\d{2}(?::\d{2})?\] <([^>\s]+)>\s?(.*)$")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_MEMBER = re.compile(r"^data/([^/]+)/(.+)\.(raw|ascii|annotation)\.txt$")


@dataclass(frozen=True)
class Message:
    """One chat message of a log: its line number, speaker and whitespace-normalised text."""

    line: int  # 0-based line number in the log file (what the annotation refers to)
    speaker: str
    text: str


def parse_log(text: str) -> list[Message]:
    """The chat messages of a log file; system lines, notices and empty messages are dropped."""
    messages = []
    for number, line in enumerate(text.split("\n")):
        match = _MESSAGE.match(line.rstrip("\r"))
        if match:
            body = " ".join(_CONTROL.sub("", match.group(2)).split())
            if body:
                messages.append(Message(number, match.group(1), body))
    return messages


def conversations(messages: list[Message], annotation: str) -> list[list[Message]]:
    """Gold conversations: connected components of the annotation links, messages in log order."""
    parent: dict[int, int] = {}

    def find(line: int) -> int:
        while parent.setdefault(line, line) != line:
            parent[line] = parent[parent[line]]  # path halving
            line = parent[line]
        return line

    annotated: set[int] = set()
    for row in annotation.split("\n"):
        fields = row.split()
        if len(fields) >= 2:
            first, second = int(fields[0]), int(fields[1])
            parent[find(first)] = find(second)
            annotated.add(max(first, second))  # the later line is the annotated one
    groups: dict[int, list[Message]] = {}
    for message in messages:
        if message.line in parent:
            groups.setdefault(find(message.line), []).append(message)
    # Keep components with an annotated message: a context line linked to nothing is not a conversation.
    return [group for group in groups.values() if any(m.line in annotated for m in group)]


def _channel(part: str, name: str) -> str:
    if part == "channel-two":
        return "linux"
    if part == "new-domains":
        return name.split(".")[0]
    return "ubuntu"


@reader
def read_irc(
    root: Path,
    parts: str | Iterable[str] | None = ("train", "dev", "test"),
    unit: str = "window",
    window: int = 50,
    speakers: bool = False,
) -> Iterator[Document]:
    """IRC messages grouped into windows (default) or gold conversations."""
    wanted = set(check_choices("parts", parts, PARTS))
    check_choice("unit", unit, UNITS)
    if window < 1:
        raise ValueError(f"window={window!r} must be a positive number of messages")

    pending: dict[tuple[str, str], dict[str, str]] = {}  # sample -> the files of it read so far
    for member, data in iter_tar(root / "irc_disentanglement_data.tar.xz", ".txt"):
        match = _MEMBER.match(member)
        if match is None:
            continue
        part, name, kind = match.groups()
        if part not in wanted or (part == "channel-two" and not name.endswith(".all")):
            continue
        log_kind = "ascii" if part == "new-domains" else "raw"  # new-domains has no raw logs
        needed = {log_kind, "annotation"} if unit == "conversation" else {log_kind}
        if kind not in needed:
            continue
        files = pending.setdefault((part, name), {})
        files[kind] = data.decode("utf-8", errors="replace")
        if files.keys() < needed:
            continue
        del pending[(part, name)]
        messages = parse_log(files[log_kind])
        if unit == "window":
            groups = [(f"w{start // window:03d}", messages[start:start + window])
                      for start in range(0, len(messages), window)]
        else:
            groups = [(f"c{group[0].line:05d}", group) for group in conversations(messages, files["annotation"])]
        for suffix, group in groups:
            lines = [f"{m.speaker}: {m.text}" if speakers else m.text for m in group]
            yield Document(f"{part}/{name}/{suffix}", "\n".join(lines), domain="irc",
                           label=_channel(part, name),
                           meta={"part": part, "file": name, "messages": len(group)})
