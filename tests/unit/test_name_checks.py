"""Names checked with a `^...$` pattern must be checked whole: `re.match` lets a trailing
newline through (`$` matches before it), so every such check uses `fullmatch`."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from runtime.policy.model import _host, _image_name, _tool_ref
from runtime.tools.builtin.web_params import HttpRequestParams
from runtime.tools.cad.model import Model3DParams


@pytest.mark.parametrize(("check", "good"), [
    (_tool_ref, "code_exec"), (_host, "example.org"), (_image_name, "python")])
def test_policy_names_refuse_a_trailing_newline(check: object, good: str) -> None:
    assert check(good) == good  # type: ignore[operator]
    with pytest.raises(ValueError):
        check(good + "\n")  # type: ignore[operator]


def test_header_and_model_names_refuse_a_trailing_newline() -> None:
    url = "http://example.org/"
    assert HttpRequestParams(url=url, headers={"X-Key": "v"}).headers == {"X-Key": "v"}
    with pytest.raises(ValidationError):
        HttpRequestParams(url=url, headers={"X-Key\n": "v"})
    assert Model3DParams(code="cube(1);", name="box").name == "box"
    with pytest.raises(ValidationError):
        Model3DParams(code="cube(1);", name="box\n")

