"""Cleaning pasted log text before a reader matches it: one linear pass per step, never raises.

Every log reader of the lab (:func:`vramlab.serving.triage.diagnose`, :func:`vramlab.vram.parse_oom_message`,
:func:`vramlab.bnb.logs.explain_log`) reads what a user pasted, which is rarely the clean text the program
printed:

* colour codes, real (``ESC [ 1;36m``) or pasted as literal text (``^[[0;36m``, ``#033[2m`` from syslog,
  ``\\x1b[``, ``\\033[``, ``\\u001b[``);
* HTML escapes from a web page (``&gt;``, ``&#39;``);
* line prefixes: vLLM worker tags ``(EngineCore pid=N)``, ``(VllmWorker rank=0 pid=N)``,
  ``(RayWorkerWrapper pid=N)``, ``(APIServer pid=N)``, vLLM's ``INFO 07-01 04:24:37 [core.py:1195]`` stamp,
  torchrun's ``[rank0]:``, docker compose's ``vllm-1  | ``, CI gutters (``2024-05-01T10:00:00.1234567Z``),
  exception-group bars ``    | ``, quote marks ``> `` and box borders ``│``;
* words broken by fixed-width wrapping (``KV cach`` / ``e is needed``): :func:`loose` builds a pattern that
  allows one space inside any word, to match the flattened text.

Every pattern here has bounded repetitions and no two unbounded quantifiers over the same characters, so each
step is linear in the length of the text (tests/test_log_readers_fuzz.py feeds 50 MB lines to it).
"""

from __future__ import annotations

import re

# A real escape sequence (CSI: ESC [ params final-byte; also the two-byte ESC x forms), or its pasted literal
# forms. Parameters are bounded ({0,32}) so a long run of digits cannot make the match quadratic.
# A literal form must carry its "[params letter" tail, so "^[a-z]" or "C:\\env" is left alone.
_ANSI = re.compile(r"\x1b(?:\[[0-9;?]{0,32}[A-Za-z]|\][^\x07\x1b]{0,256}(?:\x07|\x1b\\)|[()][A-Za-z0-9])?"
                   r"|(?:\^\[|#033|\\x1[bB]|\\033|\\u001[bB]|\\e)\[[0-9;?]{0,32}[A-Za-z]")
_ESC_HINTS = ("\x1b", "^[", "#033", "\\x1", "\\033", "\\u001", "\\e")

_HTML = (("&gt;", ">"), ("&lt;", "<"), ("&quot;", '"'), ("&#39;", "'"), ("&#x27;", "'"), ("&#34;", '"'),
         ("&apos;", "'"), ("&nbsp;", " "), ("&amp;", "&"))

# One line's leading decorations, any number of them in any order (each alternative is anchored at the
# line start and bounded, so a line costs at most a few hundred steps however long it is).
_PREFIX_PART = (
    r"(?:"
    r"[ \t]{0,16}(?:[|│┃║>]|\+-[+-]{0,16}(?: \d{1,4} -{0,16})?)[ \t]{0,16}"                # "    | ", "> ", "│ ", "+-+---- 1 ----"
    r"|\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?Z?[ \t]{1,4}"                           # CI gutter
    r"|[\w.-]{1,64}[ \t]{1,32}\|[ \t]?"                                                   # docker compose "vllm-1  | "
    r"|\[rank\d{1,5}\]:[ \t]{0,4}"                                                        # torchrun
    r"|\([A-Za-z_][\w]{0,40}(?:[ \t][\w=]{1,40}){0,3}[ \t]pid=\d{1,10}(?:,[ \t]ip=[\w.:]{1,64})?\)[ \t]{0,4}"  # worker tags
    r"|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)[ \t]{1,4}\d\d-\d\d[ \t]{1,4}\d\d:\d\d:\d\d(?:\.\d{1,6})?"
    r"[ \t]{1,4}(?:\[[^\]\s]{1,80}\]|[\w./-]{1,80}:\d{1,6}\])[ \t]{0,4}"                  # vLLM's logger stamp
    r")"
)
_PREFIX = re.compile(r"(?m)^(?:" + _PREFIX_PART + r"){1,8}")
# the same worker tags and stamps in the middle of a line (a whole traceback pasted on one line)
_INLINE = re.compile(r"\((?:EngineCore|VllmWorker|RayWorkerWrapper|APIServer|Worker)\w{0,20}(?:[ \t][\w=]{1,40}){0,3}"
                     r"[ \t]pid=\d{1,10}(?:,[ \t]ip=[\w.:]{1,64})?\)"
                     r"|\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)[ \t]\d\d-\d\d[ \t]\d\d:\d\d:\d\d(?:\.\d{1,6})?[ \t]"
                     r"(?:\[[^\]\s]{1,80}\]|[\w./-]{1,80}:\d{1,6}\])")
_SPACE = re.compile(r"\s+")
_RIGHT_BORDER = re.compile(r"(?m)[ \t]{0,64}[│┃║][ \t]{0,16}$")   # a box's right edge (rich tracebacks)


def as_text(text, name: str = "text") -> str:
    """``text`` as a str: bytes are decoded as UTF-8 (undecodable bytes become U+FFFD); anything else raises
    one ``ValueError`` naming the argument."""
    if isinstance(text, (bytes, bytearray)):
        return bytes(text).decode("utf-8", "replace")
    if not isinstance(text, str):
        raise ValueError(f"`{name}` must be the log as a str (or bytes), got {type(text).__name__}: "
                         "paste the text of the log.")
    return text


# A reader looks at most this much of a pasted log: its start (the versions, the configuration) and its end
# (where a crash is printed). A 50 MB log then costs what a 1 MB one does (about 10,000 lines); the middle is skipped, and the
# readers say so.
HEAD_CHARS = 200_000
TAIL_CHARS = 800_000


def bounded(text: str) -> tuple[str, int]:
    """``(text, skipped)``: the text itself when it is at most ``HEAD_CHARS + TAIL_CHARS`` characters, else its
    first ``HEAD_CHARS`` and last ``TAIL_CHARS`` characters joined by a line break, and how many were skipped."""
    n = len(text)
    if n <= HEAD_CHARS + TAIL_CHARS:
        return text, 0
    return text[:HEAD_CHARS] + "\n" + text[n - TAIL_CHARS:], n - HEAD_CHARS - TAIL_CHARS


def skipped_note(skipped: int) -> str:
    """The sentence a reader adds when :func:`bounded` skipped the middle of a long log."""
    return (f"the log is long: its middle ({skipped:,} characters) was not read, only the first {HEAD_CHARS:,} "
            f"and last {TAIL_CHARS:,}; paste the part around the first error to have it read")


def strip_escapes(text: str) -> str:
    """Remove colour codes (real and pasted literal forms) and undo the common HTML escapes; lines are kept."""
    if any(h in text for h in _ESC_HINTS):
        text = _ANSI.sub("", text)
    if "&" in text:
        for k, v in _HTML:
            if k in text:
                text = text.replace(k, v)
    return text.replace("\r", "\n") if "\r" in text else text


def strip_prefixes(text: str) -> str:
    """Remove each line's leading decorations (worker tags, log stamps, CI gutters, quote bars ...), and worker
    tags / log stamps inside a line; lines are kept."""
    text = _PREFIX.sub("", text)
    if "│" in text or "┃" in text or "║" in text:
        text = _RIGHT_BORDER.sub("", text)
    if "pid=" in text or ":" in text:
        text = _INLINE.sub(" ", text)
    return text


def clean_lines(text) -> str:
    """:func:`strip_escapes` then :func:`strip_prefixes`: the log's own lines, as the program printed them."""
    return strip_prefixes(strip_escapes(as_text(text)))


def flatten(text) -> str:
    """One line: :func:`clean_lines`, then every run of whitespace (line wraps included) made one space."""
    return _SPACE.sub(" ", clean_lines(text)).strip()


def loose(phrase: str) -> str:
    """A regex for ``phrase`` (literal text) that also matches it with one space inserted anywhere inside a
    word, as a fixed-width wrap leaves it once the lines are joined (``"KV cach e is needed"``)."""
    parts = []
    for i, ch in enumerate(phrase):
        if ch == " ":
            parts.append(" ")
            continue
        if i and phrase[i - 1] != " ":
            parts.append(" ?")
        parts.append(re.escape(ch))
    return "".join(parts)


__all__ = ["HEAD_CHARS", "TAIL_CHARS", "bounded", "skipped_note", "as_text", "strip_escapes", "strip_prefixes", "clean_lines", "flatten", "loose"]
