"""codemode's own tools derive their JSON Schemas at first use (``derive_now=False``): derive
every one here, so a type without a schema fails a test rather than a user's first call."""

from __future__ import annotations

import pytest

from tests.host_support import MakeHost

pytestmark = pytest.mark.anyio


async def test_every_builtin_tool_has_its_schemas(make_host: MakeHost) -> None:
    async with make_host() as (host, _probe):
        builtin = [t for t in list(host.registry) if not t.derive_now]
        names = {t.name for t in builtin}
        assert {"bash", "read_file", "edit_file", "write_file", "read_archive", "monitor_start"} <= names
        for t in builtin:
            assert t.input_schema["type"] == "object", t.name
            assert t.output_schema is not None and t.result_adapter is not None, t.name
            assert isinstance(t.null_means_absent, frozenset)


async def test_user_tools_derive_theirs_at_registration(make_host: MakeHost) -> None:
    async with make_host() as (host, _probe):
        user = [t for t in list(host.registry) if t.derive_now]
        assert user, "the test host registers tools of its own"
        assert all("output_schema" in vars(t) for t in user)  # already derived, not at first use


async def test_a_run_derives_no_builtin_schema(make_host: MakeHost) -> None:
    async with make_host() as (host, _probe):
        result = await host.run_code("print(await tools.read_file({path: 'nope'}).catch((e) => e.code))")
        assert "not_found" in result.text
        read_file = host.registry.get("read_file")
        bash = host.registry.get("bash")
        assert read_file is not None and bash is not None
        assert "output_schema" not in vars(bash)  # what `codemode run` does not need, it does not build
