"""Types of codemode's bridge to QuickJS-ng (the C extension built from codemode/engine/_qjs.c)."""

ENGINE_VERSION: str
"""The version of the QuickJS-ng engine linked in (vendor/quickjs-ng)."""

class JSError(Exception):
    """A JavaScript exception: its text (``String(exception)``), a newline, then its stack."""

class Channel:
    """One program's calls out to the event loop, its results in, and its stop signal.

    Args:
        immediate: Wake the loop at each call (else when the program next waits, so calls it
            makes together reach the loop together).
        hands_over: The caller of ``Context.run(..., wait=False)`` takes the calls itself each
            time it returns "wait" (an engine worker's main thread): posting wakes nothing; only
            the calls of an immediate channel that JS runs on past for 1 ms make the eventfd
            readable (from the interrupt check).
    """

    def __init__(self, immediate: bool = True, hands_over: bool = False) -> None: ...
    def fileno(self) -> int:
        """The eventfd that becomes readable when the program has posted calls."""
    def take_calls(self) -> list[tuple[int, str, str, int]]:
        """The calls posted since the last take: (call id, tool name, arguments JSON, size)."""
    def post(self, call_id: int, ok: bool, payload: str, is_text: bool, /) -> None:
        """Hand a call's result to the program: its text, JSON, or error JSON (any thread)."""
    def interrupt(self) -> None:
        """Stop the program: its next interrupt check throws, a wait returns (any thread)."""
    @property
    def interrupted(self) -> bool: ...
    @property
    def unread(self) -> int:
        """Results posted that the program has not read yet (it reads them in posting order)."""

class Context:
    """A fresh QuickJS runtime and context, used by one thread at a time.

    Enforced: a method that uses the engine while another thread (or the host function, calling
    back from inside its JS) is using it raises RuntimeError ("in use"); after `free` every such
    method raises RuntimeError ("freed"). `disarm`, `outstanding`, `slice_end` and the channel's
    `post`/`interrupt` are safe from any thread at any time. JS's stack limit is fitted to the
    stack of the thread each call runs on.

    Args:
        prelude: Load the prelude `set_prelude` gave (else a bare context, for eval only).

    Raises:
        RuntimeError: A prelude is asked for and none was set.
        JSError: The prelude threw.
    """

    def __init__(self, prelude: bool = True) -> None: ...
    def eval(self, source: str, filename: str = "<eval>", /) -> str | int | float | bool | None:
        """A script's value: str, int, float, bool or None, else its JSON text."""
    def set_limits(self, memory_bytes: int, stack_bytes: int, /) -> None: ...
    def set_host(self, host: object, /) -> None:
        """hostCall's Python side, ``host(kind, id, name, payload_json, size) -> str``, or None."""
    def start(
        self,
        channel: Channel,
        source: str,
        data_limit: int,
        calls_limit: int,
        effectful_json: str,
        namespaces_json: str,
        inline_json: str,
        /,
    ) -> None:
        """Compile the wrapped program and start it: its first stretch runs here."""
    def run(self, deadline: float, timer_at: float, wait: bool = True, /) -> tuple[str, str | None]:
        """Run until the host must act: ("drain", text), ("timer"|"idle"|"deadline"|"interrupted", None),
        or, with ``wait`` false, ("wait", None) where it would wait for a result or a timer."""
    def set_slice(self, seconds: float, stack_bytes: int = 0, /) -> bool:
        """Run only ``seconds`` from now, refusing calls into Python (0 ends it); False when this
        thread's stack is too small for a slice."""
    @property
    def slice_end(self) -> str | None:
        """What ended the slice early: None, "refused" (a call into Python) or "expired"."""
    def fire(self, timer_id: int, /) -> None: ...
    def take_output(self) -> str: ...
    def take_chunk(self) -> str | None: ...
    def report(self) -> str: ...
    def disarm(self) -> None:
        """Ignore interrupts from now on (collecting a stopped program's output)."""
    def free(self) -> None:
        """Free the engine now, on this thread; the object is unusable after."""
    def hand_back(self) -> None:
        """Hand the engine to the keeper thread to free (here, when none runs); unusable after."""
    @property
    def outstanding(self) -> int:
        """Calls posted to the loop and not yet settled."""

def compile(source: str, filename: str, /) -> bytes:
    """A script's bytecode (without its source)."""

def set_prelude(bytecode: bytes, spare: int, idle: bool = False, /) -> None:
    """The prelude every Context() gets (once per process), how many contexts to keep ready, and
    whether the keeper thread runs at SCHED_IDLE (an engine worker's)."""

def take_ready() -> Context | None:
    """A fresh context the keeper made ahead, or None (never made nor waited for here)."""

def prime_stack() -> int:
    """Look up this thread's stack bounds now (bytes left below the caller; 0: unknown)."""
    ...

def keeper_stats() -> dict[str, int]:
    """How contexts were had and freed so far: ahead by the keeper thread, or by the caller."""

def spin_readable(fd: int, seconds: float, /) -> int:
    """1 when fd became readable within seconds, looked at without sleeping (the CPU yielded
    between looks) nor the GIL; 0 when not; -1 when a yield let another task run.

    Raises:
        ValueError: fd is negative, or seconds is not from 0 to 60.
    """
