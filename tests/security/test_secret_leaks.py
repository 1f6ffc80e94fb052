"""Secret leaks through redaction: a value redacted in one place but printed in another, a
quoted value cut at an inner quote, a key block, a value split across stream chunks.

Every case is checked on the text (`Redactor.redact`), on bytes (`redact_bytes`) and through a
`StreamRedactor` fed in small chunks, since command output takes all three ways.
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from codemode import CallResult, Host
from codemode.state import Redactor, State, StreamRedactor
from tests.state.secret_fixtures import pem

R = Redactor(environ={})


PADDING = "ordinary output line\n" * 40  # over 512 bytes: matched through the Hyperscan pass


def redacted_every_way(text: str) -> list[str]:
    """``text`` redacted as text, as bytes, as a stream in 7-byte chunks, and after a long
    ordinary head (a short text is matched rule by rule, a long one through the Hyperscan
    database: both must find the same)."""
    data = text.encode()
    stream = StreamRedactor(R)
    streamed = b"".join(stream.feed(data[i : i + 7]) for i in range(0, len(data), 7)) + stream.flush()
    long = R.redact(PADDING + text)
    assert long.startswith(PADDING)
    return [R.redact(text), R.redact_bytes(data).decode(), streamed.decode(), long[len(PADDING) :]]


@pytest.mark.parametrize(
    "text",
    [
        "password = 'Qz7!pLm2vX' | 'Qz7!pLm2vX'",
        "password = 'Qz7!pLm2vX'; echo Qz7!pLm2vX; login --pw=Qz7!pLm2vX",
        'db_password: "Qz7!pLm2vX"\nretrying with Qz7!pLm2vX\nfailed: Qz7!pLm2vX rejected',
        "export API_TOKEN=Qz7pLm2vX9wR\ncurl -H 'X-Key: Qz7pLm2vX9wR' https://example.com",
    ],
)
def test_every_occurrence_of_a_found_value_is_redacted(text: str) -> None:
    for out in redacted_every_way(text):
        assert "Qz7" not in out, out
        assert "[REDACTED:" in out


def test_a_value_found_in_one_chunk_is_redacted_in_later_chunks() -> None:
    stream = StreamRedactor(R)
    first = stream.feed(b"config: password = 'Qz7!pLm2vX'\n")
    later = stream.feed(b"connecting as admin with Qz7!pLm2vX\n") + stream.flush()
    assert b"Qz7" not in first and b"Qz7" not in later
    assert later == b"connecting as admin with [REDACTED:secret]\n"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ('password = "N{w44mQp\'2si(zY8"', "N{w44mQp'2si(zY8"),
        ("password = 'ab\"cd9!ef\"gh'", 'ab"cd9!ef"gh'),
        ('secret: "q9\\"inner\\"tail77"', 'q9\\"inner\\"tail77'),
        ("api_key = 'it\\'s-a-secret-4242'", "it\\'s-a-secret-4242"),
        ('{"password": "p@ss\'w0rd\\"x2"}', "p@ss'w0rd\\\"x2"),
    ],
)
def test_a_quoted_value_is_taken_whole_with_inner_quotes_and_escapes(text: str, secret: str) -> None:
    for out in redacted_every_way(text):
        assert out.count("[REDACTED:") == 1, out
        tail = secret[len(secret) // 2 :]
        assert tail not in out, out  # the tail after an inner quote is not printed
        assert out.endswith(("[REDACTED:secret]'", '[REDACTED:secret]"', '[REDACTED:secret]"}')), out


@pytest.mark.parametrize("kind", ["RSA PRIVATE KEY", "OPENSSH PRIVATE KEY", "EC PRIVATE KEY", "PRIVATE KEY"])
def test_a_private_key_block_is_redacted_on_every_line(kind: str) -> None:
    key = pem(kind, lines=12)
    body = key.splitlines()[1:-1]
    text = f"cat id_key\n{key}\nexit 0\n"
    for out in redacted_every_way(text):
        assert not any(line in out for line in body), out
        assert out.startswith("cat id_key\n") and out.endswith("exit 0\n")


def test_a_key_block_cut_before_its_end_is_redacted_to_the_end_of_the_text() -> None:
    key = pem("RSA PRIVATE KEY", lines=12)
    head = "\n".join(key.splitlines()[:6])  # what a head cut of the output keeps
    for out in redacted_every_way(f"output:\n{head}"):
        assert not any(line in out for line in head.splitlines()[1:]), out


@pytest.mark.parametrize("cut", [1, 4, 9, 15])
def test_a_repeated_value_split_across_chunks_is_redacted_in_both_places(cut: int) -> None:
    line = b"password = 'Qz7!pLm2vX'\n"
    data = line + b"again Qz7!pLm2vX and Qz7!pLm2vX\n"
    split = len(line) + 6 + cut  # inside the second line's first copy
    stream = StreamRedactor(R)
    out = stream.feed(data[:split]) + stream.feed(data[split:]) + stream.flush()
    assert b"Qz7" not in out, out
    assert out.count(b"[REDACTED:secret]") == 3


def test_a_short_value_is_not_searched_for_elsewhere() -> None:
    # A value of a few characters is everywhere in ordinary text: only its own place is redacted.
    out = R.redact("password = 'ab12'\nlabel ab12 stays")
    assert out == "password = '[REDACTED:secret]'\nlabel ab12 stays"


def test_many_found_values_are_each_redacted_everywhere() -> None:
    # Past a few values, the other occurrences are found in one literal pass instead of one by one.
    values = [f"Zq{i}x!Wm{i * 7}pT{i}" for i in range(12)]
    defined = "".join(f"password_{i} = '{v}'\n" for i, v in enumerate(values))
    used = "".join(f"login user{i} {v} ok\n" for i, v in enumerate(reversed(values)))
    for out in redacted_every_way(defined + used):
        assert not any(v in out for v in values), out
        assert out.count("[REDACTED:secret]") == 2 * len(values)
        assert "login user0 [REDACTED:secret] ok\n" in out


@pytest.mark.parametrize(
    ("text", "tail"),
    [
        ('app --password "ab\\"cd9ef" --verbose', 'cd9ef"'),
        ("sshpass -p 'it\\'s9secret' ssh host", "s9secret"),
        ('deploy --token "x\'y9zzzz" now', "y9zzzz"),
    ],
)
def test_a_quoted_command_line_secret_is_taken_whole(text: str, tail: str) -> None:
    for out in redacted_every_way(text):
        assert tail not in out and out.count("[REDACTED:secret]") == 1, out


def test_a_token_its_rule_finds_anywhere_is_redacted_at_every_occurrence() -> None:
    # Such a value is not searched for (its rule finds each copy): every copy must still go.
    token = "ghp_" + "Zx9Qw2" * 6
    text = f"GITHUB_TOKEN={token}\ncurl -H 'token {token}' x\n{token}:x-oauth-basic\n"
    for out in redacted_every_way(text):
        assert "Zx9Qw2" not in out and out.count("[REDACTED:github-token]") == 3, out


@pytest.mark.parametrize(
    "text",
    [
        "GOOGLE_CREDENTIALS=" + "ewogICJ0eXBlIjogInNlcnZpY2VfYWNjb3VudCIs" + "Qk9Yc2VjcmV0" * 100,
        "password = '" + "x9Y!" * 120 + "'",
        "db.password: " + "Ab9" * 150,
    ],
)
def test_a_long_value_is_redacted_whole(text: str) -> None:
    # A value longer than a few hundred characters was cut at the limit and its tail printed.
    for out in redacted_every_way(text):
        assert out.endswith(("[REDACTED:secret]", "[REDACTED:secret]'")), out[-80:]


# ---- one result, several blocks: a value found in one is cut in all --------------------------


@pytest.mark.parametrize("order", ["assigned first", "assigned last"])
def test_a_value_found_in_one_block_is_redacted_in_the_others(order: str) -> None:
    blocks = ["config: password = 'Qz7!pLm2vX'\n", "login failed for Qz7!pLm2vX\n", "exit 1"]
    if order == "assigned last":
        blocks.reverse()
    shown = R.redact_together(blocks)
    assert len(shown) == 3 and all("Qz7" not in block for block in shown), shown
    assert shown[blocks.index("exit 1")] == "exit 1"
    known: dict[bytes, bytes] = {}
    R.redact(blocks[0] if order == "assigned first" else blocks[2], known)
    assert "Qz7" not in R.redact("retrying with Qz7!pLm2vX", known)
    assert R.redact("retrying with Qz7!pLm2vX") == "retrying with Qz7!pLm2vX"  # alone it is no secret


LEAKY_SCRIPT = """\
echo "db_password = 'Qz7!pLm2vX'"
echo "ERROR: login failed for Qz7!pLm2vX" >&2
"""


def _texts(result: CallResult) -> str:
    return result.text + json.dumps(result.structured_content)


@pytest.mark.anyio
async def test_a_value_assigned_in_stdout_is_redacted_in_stderr_and_a_long_tail(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "leak.sh").write_text(LEAKY_SCRIPT)
    (ws / "swapped.sh").write_text("echo 'Qz7!pLm2vX rejected'\necho \"password: 'Qz7!pLm2vX'\" >&2\n")
    # The head shows the assignment; 40,000 lines later the tail shows the bare value.
    (ws / "long.sh").write_text(
        "echo \"password = 'Qz7!pLm2vX'\"\nseq 1 40000\necho 'connected as Qz7!pLm2vX'\n"
    )
    async with Host(workspace=ws, state_dir=tmp_path / "state") as host:
        with anyio.fail_after(120):
            for script in ("leak.sh", "swapped.sh", "long.sh"):
                result = await host.call_tool("bash", {"command": f"sh {script}"})
                assert not result.is_error, result.text
                assert "[REDACTED:" in result.text, result.text
                assert "Qz7" not in _texts(result), (script, result.text)
            long = await host.call_tool("bash", {"command": "sh long.sh"})
            assert "40000" in long.text  # the tail is shown: the bare value was there to leak


@pytest.mark.anyio
async def test_a_report_and_the_read_action_redact_across_their_texts(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "leak.sh").write_text(LEAKY_SCRIPT + "while [ ! -e done ]; do sleep 0.05; done\n")
    async with Host(workspace=ws, state_dir=tmp_path / "state") as host:
        with anyio.fail_after(120):
            started = await host.call_tool("bash", {"command": "sh leak.sh", "run_in_background": True})
            assert not started.is_error, started.text
            pid = started.structured_content["process_id"]
            # The ERROR line is reported (its line, the output before it) on a later result.
            results: list[CallResult] = []
            while not any("still running" in r.text for r in results):
                results.append(await host.call_tool("bash", {"command": "true"}))
            results.append(await host.call_tool("bash", {"action": "read", "process_id": pid}))
            (ws / "done").touch()
            results.append(
                await host.call_tool(
                    "bash", {"action": "wait", "process_id": pid, "until": "exit", "timeout_ms": 60_000}
                )
            )
            results.append(await host.call_tool("bash", {"command": "true"}))
    shown = "".join(_texts(r) for r in results)
    assert "login failed for" in shown and "[REDACTED:" in shown
    assert "Qz7" not in shown, shown[max(shown.find("Qz7") - 300, 0) :][:600]


# -- secrets that leak at a cut: a page or a released piece that starts or ends inside one --

SECRET = "Kd3Lm8ZpWx7Tr2Yh4"


def _raw_log(tmp_path: Path, text: bytes) -> tuple[State, str]:
    state = State(tmp_path / "state", Redactor(environ={}))
    log = state.archive.open_log(kind="log", session_id="s", redact=False)
    log.write(text)
    log.close()
    return state, log.ref


@pytest.mark.parametrize("offset", range(0, 40))
def test_a_log_page_starting_inside_a_secret_shows_none_of_it(tmp_path: Path, offset: int) -> None:
    state, ref = _raw_log(tmp_path, f"db password = '{SECRET}'\nnext line\n".encode())
    with state:
        page = state.archive.read(ref, offset, session_id="s").data
    assert not any(SECRET[i : i + 4].encode() in page for i in range(len(SECRET) - 3)), page


@pytest.mark.parametrize("at", [60, 400, 800, 1200])
def test_a_log_page_starting_inside_a_private_key_shows_none_of_it(tmp_path: Path, at: int) -> None:
    key = pem(lines=20)
    state, ref = _raw_log(tmp_path, f"config follows\n{key}\ndone\n".encode())
    body = key.splitlines()[3]
    with state:
        page = state.archive.read(ref, at, session_id="s").data
    assert body[:20].encode() not in page and body[-20:].encode() not in page, page


@pytest.mark.parametrize("limit", [20, 30, 40])
def test_a_log_page_ending_inside_a_secret_shows_none_of_it(tmp_path: Path, limit: int) -> None:
    # One long line: the page cannot end at a line end.
    state, ref = _raw_log(tmp_path, f"{'x' * 10} password = '{SECRET}' {'y' * 100}".encode())
    with state:
        page = state.archive.read(ref, 0, limit, session_id="s").data
    assert not any(SECRET[i : i + 4].encode() in page for i in range(len(SECRET) - 3)), page


def test_a_value_assigned_before_a_page_is_redacted_bare_in_it(tmp_path: Path) -> None:
    filler = "".join(f"line {n}\n" for n in range(20000))
    text = f"password = '{SECRET}'\n{filler}connected as {SECRET}\n".encode()
    state, ref = _raw_log(tmp_path, text)
    tail = text.rindex(b"connected")
    with state:
        page = state.archive.read(ref, tail - 100, session_id="s").data
    assert b"connected as [REDACTED:" in page, page
    assert SECRET.encode() not in page


def test_the_read_action_redacts_from_the_start_of_the_line(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()

    async def main() -> str:
        async with Host(workspace=tmp_path / "ws", state_dir=tmp_path / "home") as host:
            with anyio.fail_after(60):
                started = await host.call_tool(
                    "bash", {"command": f"echo \"db password = '{SECRET}'\"", "run_in_background": True}
                )
                pid = started.structured_content["process_id"]
                await host.call_tool(
                    "bash", {"action": "wait", "process_id": pid, "until": "exit", "timeout_ms": 30_000}
                )
                read = await host.call_tool("bash", {"action": "read", "process_id": pid, "offset_bytes": 16})
                return _texts(read)

    shown = anyio.run(main)
    assert "[REDACTED:" in shown and SECRET[4:] not in shown, shown


@pytest.mark.parametrize(
    ("head", "tail"),
    [
        (" password = ", f"'{SECRET}QQQQ'\n"),  # the name released before the cut, the value after
        (f" password = 'Kd3Lm8Zp {SECRET[8:]}", " QQQQ'\n"),  # a quoted value with a space, cut in it
        (f" password = '{SECRET}", "QQQQ'\n"),  # a value cut in the middle
    ],
)
def test_a_long_line_cut_by_the_stream_never_releases_part_of_a_secret(head: str, tail: str) -> None:
    stream = StreamRedactor(Redactor(environ={}))
    out = stream.feed(("y" * 66000 + head).encode()) + stream.feed(tail.encode()) + stream.flush()
    assert b"[REDACTED:" in out, out[-200:]
    for piece in ("Kd3L", "Wx7T", "Yh4", "QQQQ"):
        assert piece.encode() not in out, (piece, out[-200:])
    assert out.count(b"y") == 66000  # nothing but the secret was held back or lost
