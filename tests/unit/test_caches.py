"""The one TTL cache (``jobservice.caches``): kept while fresh, read again after, capped, and one set
per ``Services``, so a fresh services object is a fresh process."""

from __future__ import annotations

from pathlib import Path

from jobservice.auth.principal import Principal
from jobservice.caches import Caches, TtlCache
from jobservice.settings import Settings
from jobservice.wiring import build_services


def test_an_answer_is_kept_while_fresh_then_loaded_again_with_the_old_one() -> None:
    clock = [0.0]
    cache: TtlCache[str, int] = TtlCache(5.0, 10, clock=lambda: clock[0])
    seen: list[int | None] = []

    def load(old: int | None) -> int:
        seen.append(old)
        return (old or 0) + 1

    assert [cache.get("a", load) for _ in range(3)] == [1, 1, 1] and seen == [None]
    clock[0] = 5.1
    assert cache.get("a", load) == 2 and seen == [None, 1]  # the loader sees the expired answer
    cache.drop("a")
    assert cache.get("a", load) == 1  # dropped: as if never read


def test_a_full_cache_starts_over_rather_than_growing() -> None:
    cache: TtlCache[int, int] = TtlCache(60.0, 3)
    for key in range(3):
        cache.get(key, lambda _old: 0)
    assert cache.get(0, lambda _old: 99) == 0  # still kept
    assert cache.get(3, lambda _old: 3) == 3  # a fourth key: everything else is dropped
    assert cache.get(0, lambda _old: 99) == 99


def test_each_services_object_has_its_own_caches(tmp_path: Path) -> None:
    settings = Settings(_env_file=None, var_dir=tmp_path)  # type: ignore[call-arg]
    one, two = build_services(settings), build_services(settings)
    alice = Principal(tenant="acme", role="user", key_id="key_a")
    assert one.caches.principals.get("s:x", lambda _old: alice) is alice
    assert two.caches.principals.get("s:x", lambda _old: None) is None  # not one's answer
    assert one.caches.principals.get("s:x", lambda _old: None) is alice
    mine = Caches()
    assert build_services(settings, caches=mine).caches is mine
