"""The deployment store's TTL and vector index (``LOOPLINE_STORE``): items expire as
LangGraph's store TTL says (minutes, renewed by reads unless told not to, a default for
puts without one, a sweep that frees them), and ``search(query=...)`` ranks as
LangGraph's ``InMemoryStore`` ranks with the same index and embedding function."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.store.memory import InMemoryStore

from services.redis_store import RedisStore
from services.settings import Settings
from services.store_config import BadEmbed, StoreConfig, StoreIndex
from tests.store_tooling import embed
from tests.support import unique_prefix

pytestmark = pytest.mark.fast

EMBED = "tests.store_tooling:embed"


class Clock:
    """Seconds that pass only when the test says so."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now

    def minutes(self, n: float) -> None:
        self.now += n * 60


def store(redis_url: str, clock: Clock, **config: Any) -> RedisStore:
    return RedisStore(redis_url, unique_prefix(), StoreConfig.model_validate(config), clock=clock)


def test_an_item_with_a_ttl_expires_and_a_read_renews_it(redis_url: str) -> None:
    clock = Clock()
    s = store(redis_url, clock)
    s.put(("a",), "k", {"v": 1}, ttl=10)
    s.put(("a",), "forever", {"v": 2})
    clock.minutes(8)
    assert s.get(("a",), "k") is not None  # renews: 10 more minutes from here
    clock.minutes(8)
    assert s.get(("a",), "k", refresh_ttl=False) is not None  # does not renew
    clock.minutes(3)
    assert s.get(("a",), "k") is None
    assert [i.key for i in s.search(("a",))] == ["forever"]
    clock.minutes(10_000)
    assert s.get(("a",), "forever") is not None


def test_search_renews_what_it_returns_and_skips_what_expired(redis_url: str) -> None:
    clock = Clock()
    s = store(redis_url, clock)
    s.put(("a",), "k1", {"v": 1}, ttl=10)
    s.put(("a",), "k2", {"v": 2}, ttl=10)
    clock.minutes(9)
    assert {i.key for i in s.search(("a",), filter={"v": 1})} == {"k1"}  # k1 renewed
    clock.minutes(2)
    assert [i.key for i in s.search(("a",))] == ["k1"]


def test_the_configured_default_ttl_and_refresh_on_read(redis_url: str) -> None:
    clock = Clock()
    s = store(redis_url, clock, ttl={"default_ttl": 5, "refresh_on_read": False})
    s.put(("a",), "k", {"v": 1})
    s.put(("a",), "long", {"v": 2}, ttl=60)
    clock.minutes(4)
    assert s.get(("a",), "k") is not None  # the configuration says reads do not renew
    clock.minutes(2)
    assert s.get(("a",), "k") is None
    assert s.get(("a",), "long") is not None
    assert s.ttl_config == {"default_ttl": 5, "refresh_on_read": False}


def test_the_sweep_frees_what_expired(redis_url: str) -> None:
    clock = Clock()
    s = store(redis_url, clock)
    for i in range(5):
        s.put(("swept", str(i)), "k", {"v": i}, ttl=1)
    s.put(("kept",), "k", {"v": 0})
    assert s.sweep_ttl() == 0
    clock.minutes(2)
    assert s.sweep_ttl() == 5
    assert s.list_namespaces() == [("kept",)]
    left = sorted(k.decode() for k in s.redis.scan_iter(f"{s.prefix}:*"))
    assert left == [f"{s.prefix}:store:namespaces", f'{s.prefix}:store:ns:["kept"]']


def operations(s: Any) -> list[Any]:
    s.put(("docs",), "py", {"text": "Python tutorial", "n": 1})
    s.put(("docs",), "ts", {"text": "TypeScript guide", "n": 2})
    s.put(("docs",), "soup", {"text": "cooking soup", "n": 3})
    s.put(("docs",), "plain", {"other": 1, "n": 4}, index=False)
    s.put(("docs", "deep"), "both", {"text": "python guide", "title": "blue sky", "n": 5})
    out: list[Any] = []
    for query, kwargs in (
        ("python", {}),
        ("a guide to python", {"limit": 2}),
        ("soup", {"offset": 1, "limit": 3}),
        ("blue sky", {"filter": {"n": {"$gt": 1}}}),
        ("sky", {"limit": 10}),
    ):
        found = s.search(("docs",), query=query, **kwargs)
        out.append([(i.namespace, i.key, round(i.score, 6) if i.score else None) for i in found])
    return out


def test_query_ranks_as_langgraphs_in_memory_store(redis_url: str) -> None:
    index = {"embed": EMBED, "dims": 8, "fields": ["text", "title"]}
    ours = operations(store(redis_url, Clock(), index=index))
    theirs = operations(
        InMemoryStore(index={"embed": embed, "dims": 8, "fields": ["text", "title"]})
    )
    assert ours == theirs
    assert ours[0][0][1] in {"py", "both"}  # a python text first: the ranking is real


def test_a_put_may_name_its_own_fields_to_embed(redis_url: str) -> None:
    index = {"embed": EMBED, "dims": 8, "fields": ["text"]}
    s = store(redis_url, Clock(), index=index)
    s.put(("d",), "k", {"text": "cooking soup", "title": "python"}, index=["title"])
    s.put(("d",), "j", {"text": "python"})
    scores = {i.key: i.score for i in s.search(("d",), query="python")}
    assert scores["k"] == pytest.approx(scores["j"])


def test_the_settings_read_langgraph_json_store_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "LOOPLINE_STORE",
        '{"ttl": {"default_ttl": 60, "sweep_interval_minutes": 5},'
        ' "index": {"embed": "tests.store_tooling:embed", "dims": 8}}',
    )
    config = Settings().store
    assert config is not None and config.ttl is not None and config.index is not None
    assert (config.ttl.default_ttl, config.ttl.refresh_on_read) == (60, True)
    assert config.index.embeddings().embed_query("python")[0] == pytest.approx(1.01)
    monkeypatch.setenv("LOOPLINE_STORE", '{"ttl": {"default_tl": 60}}')
    with pytest.raises(ValueError, match="default_tl"):
        Settings()


@pytest.mark.parametrize("embed_name", ["nothing", "tests.store_tooling:missing", "no_file.py:x"])
def test_an_index_that_names_nothing_is_refused(embed_name: str) -> None:
    with pytest.raises(BadEmbed):
        StoreIndex(embed=embed_name, dims=8).embeddings()
