"""What a service process changes about its own machinery to spend less CPU per step, and
that each change leaves behaviour as it was: the event loop's coalesced cross-thread
wake-ups (``services.eventloop``) lose no callback, and LangChain's per-call reflection
done once (``services.reflection``) gives LangChain's own answers."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import StructuredTool, tool
from langchain_core.tools import base as tools_base
from langchain_core.utils import _signature

from services import reflection
from services.eventloop import CoalescingEventLoop

pytestmark = pytest.mark.fast


class CountingLoop(CoalescingEventLoop):
    """Counts the bytes actually written to the self-pipe."""

    writes = 0

    def _write_to_self(self) -> None:
        pending = self._wake_pending
        super()._write_to_self()
        if not pending:
            self.writes += 1


def test_callbacks_from_many_threads_all_run_with_fewer_wake_ups() -> None:
    threads, each = 8, 2000
    loop = CountingLoop()
    try:
        seen: list[int] = []
        done = loop.create_future()

        def note(n: int) -> None:
            seen.append(n)
            if len(seen) == threads * each:
                done.set_result(None)

        def produce(start: int) -> None:
            for n in range(start, start + each):
                loop.call_soon_threadsafe(note, n)

        workers = [threading.Thread(target=produce, args=(t * each,)) for t in range(threads)]

        async def main() -> None:
            for w in workers:
                w.start()
            await asyncio.wait_for(done, 30)

        loop.run_until_complete(main())
        for w in workers:
            w.join()
        assert sorted(seen) == list(range(threads * each))
        assert 0 < loop.writes < threads * each
    finally:
        loop.close()


def test_a_sleeping_loop_always_wakes_for_a_thread_s_callback() -> None:
    """The race the flag must not lose: the loop asleep in select, a thread completing
    just as the previous wake-up is read, over and over."""
    loop = CoalescingEventLoop()
    try:

        async def main() -> int:
            woken = 0
            for n in range(300):
                fut = loop.create_future()
                delay = (n % 5) * 0.0002
                timer = threading.Timer(delay, loop.call_soon_threadsafe, (fut.set_result, n))
                timer.start()
                assert await asyncio.wait_for(fut, 5) == n
                woken += 1
            return woken

        assert loop.run_until_complete(main()) == 300
    finally:
        loop.close()


class DrainRace(CoalescingEventLoop):
    """A thread's callback that lands while the loop drains its self-pipe, made to
    happen: the drain reads the byte that callback wrote."""

    raced = False

    def _process_self_data(self, data: bytes) -> None:
        super()._process_self_data(data)  # type: ignore[misc]
        if not self.raced:
            self.raced = True
            self.call_soon_threadsafe(lambda: None)


def test_a_wake_up_written_while_the_pipe_is_drained_leaves_none_owed() -> None:
    """A callback whose byte the drain read was run; the next thread's callback must
    still wake the sleeping loop (a flag cleared before the drain stayed set with the
    pipe empty: every later wake-up from a thread was lost)."""
    loop = DrainRace()
    try:

        async def main() -> None:
            await loop.run_in_executor(None, int)  # one wake-up through the pipe
            assert loop.raced
            fut = loop.create_future()
            threading.Timer(0.05, loop.call_soon_threadsafe, (fut.set_result, 1)).start()
            # wait_for's own timer is the only other wake-up: a lost one shows as a wait
            # that lasts until that timer, and the callback runs when it fires
            started = time.monotonic()
            await asyncio.wait_for(fut, 3)
            slept = time.monotonic() - started
            assert slept < 2.5, f"the loop slept {slept:.1f} s through a thread's callback"

        loop.run_until_complete(main())
    finally:
        loop.close()


def test_run_in_executor_results_arrive_on_the_coalescing_loop() -> None:
    async def main() -> list[int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, CoalescingEventLoop)
        calls = [loop.run_in_executor(None, abs, -n) for n in range(500)]
        return list(await asyncio.gather(*calls))

    from services.eventloop import run

    assert run(main()) == list(range(500))


# -- LangChain's reflection, once per function ------------------------------------------


@pytest.fixture(scope="module", autouse=True)
def installed() -> None:
    reflection.install()


def test_installing_replaces_the_functions_langchain_calls_and_is_idempotent() -> None:
    from langchain_core.language_models import chat_models
    from langchain_core.tools import structured

    first = (tools_base._get_type_hints, structured._signature_parameters)
    reflection.install()
    assert (tools_base._get_type_hints, structured._signature_parameters) == first
    assert chat_models._signature_parameters is structured._signature_parameters
    assert structured._signature_parameters is not _signature._signature_parameters


def test_type_hints_are_langchain_s_and_each_caller_gets_its_own_dict() -> None:
    def f(x: int, config: RunnableConfig) -> str:
        return str(x)

    original = tools_base._get_type_hints.__wrapped__  # type: ignore[attr-defined]
    first = tools_base._get_type_hints(f)
    assert first == original(f)
    assert first is not None
    first["x"] = str  # a caller changing its copy changes nobody else's
    assert tools_base._get_type_hints(f) == original(f)
    extras = tools_base._get_type_hints(f, include_extras=True)
    assert extras == original(f, include_extras=True)


def test_a_hint_that_cannot_be_resolved_yet_is_tried_again() -> None:
    namespace: dict[str, Any] = {}
    exec("def f(x: 'Later') -> int:\n    return 1\n", namespace)
    f = namespace["f"]
    assert tools_base._get_type_hints(f) is None  # 'Later' is not defined yet
    namespace["Later"] = int
    assert tools_base._get_type_hints(f) == {"x": int, "return": int}


def test_signatures_of_bound_methods_are_the_function_s_for_every_instance() -> None:
    class Thing:
        def run(self, a: int, run_manager: Any = None) -> int:
            return a

    one, two = Thing(), Thing()
    params = structured_params(one.run)
    assert list(params) == ["a", "run_manager"]
    assert structured_params(two.run) is params
    assert list(structured_params(Thing.run)) == ["self", "a", "run_manager"]


def structured_params(obj: Any) -> Any:
    from langchain_core.tools import structured

    return structured._signature_parameters(obj)


def test_tools_behave_as_langchain_s_with_the_memo_installed() -> None:
    """A tool that takes the run's config still gets it; one that takes callbacks too."""

    @tool
    def configured(x: int, config: RunnableConfig) -> str:
        """Echo x with the run's tag."""
        return f"{x}:{config.get('tags')}"

    def plain(x: int) -> int:
        return x + 1

    simple = StructuredTool.from_function(plain, description="add one")
    for _ in range(3):
        assert configured.invoke({"x": 1}, config={"tags": ["t"]}) == "1:['t']"
        assert simple.invoke({"x": 1}) == 2
        assert asyncio.run(configured.ainvoke({"x": 2}, config={"tags": ["u"]})) == "2:['u']"


def test_type_hints_are_resolved_once_per_function() -> None:
    evaluated: list[int] = []

    def tick() -> type:
        evaluated.append(1)
        return int

    namespace: dict[str, Any] = {"tick": tick}
    exec("def f(x: 'tick()') -> None:\n    pass\n", namespace)
    for _ in range(5):
        assert tools_base._get_type_hints(namespace["f"]) == {"x": int, "return": type(None)}
    assert len(evaluated) == 1


def test_the_transcript_cache_holds_every_task_a_service_may_have_in_flight() -> None:
    from services.settings import Settings

    assert Settings().transcript_cache_size == Settings().transcript_cache_tasks == 4096
    busy = Settings(concurrency_model=10_000)
    assert busy.transcript_cache_size == 20_000  # each task in flight, and as many between
    assert Settings(transcript_cache_tasks=50_000).transcript_cache_size == 50_000
