"""The python image is a data sandbox: "plot this CSV" works through the API and the agent.

numpy, pandas, matplotlib (Agg), scipy, pillow, sqlite3 and the jq, git, pdftotext and
sqlite3 commands are in the image (Debian's packages, built offline). A CSV uploaded, plotted
by code_exec into the workspace, downloaded and checked as a real PNG; the same asked of the
agent, with the fake model scripting the code_exec call.
"""

from __future__ import annotations

import struct

import pytest

from tests.e2e import test_agent_api as agent
from tests.e2e.conftest import Server
from tests.fakes.ollama import FakeOllama
from tests.fakes.script import Call, Reply

pytestmark = pytest.mark.docker

# the agent tests' server (fake model, harness policy) and helpers
# the module-scoped fake Ollama (`ollama`), `account` and `user` come from tests/e2e/conftest.py
down_host, fresh_script, server = agent.down_host, agent.fresh_script, agent.server
new_session, send, watch = agent.new_session, agent.send, agent.watch

CSV = b"month,sales\n1,10\n2,14\n3,9\n4,21\n5,17\n"
PLOT = (
    "import pandas as pd, matplotlib.pyplot as plt\n"
    "df = pd.read_csv('data.csv')\n"
    "ax = df.plot(x='month', y='sales', marker='o')\n"
    "ax.figure.savefig('plot.png', dpi=80)\n"
    "print('rows', len(df), 'backend', plt.get_backend())\n"
)


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n", data[:16]
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def run(server: Server, token: str, session: str, tool: str, **args: object) -> dict:
    with server.client(token) as client:
        resp = client.post(f"/v1/sessions/{session}/exec", json={"tool": tool, "args": args})
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def test_the_data_stack_and_tools_are_there(server: Server, user: str) -> None:
    session = new_session(server, user)
    code = ("import numpy, pandas, scipy.stats, PIL.Image, sqlite3, matplotlib\n"
            "import matplotlib.pyplot as plt\n"
            "print(matplotlib.get_backend(), int(numpy.arange(4).sum()),"
            " round(float(scipy.stats.norm.cdf(0)), 2), sqlite3.sqlite_version_info[0])")
    done = run(server, user, session, "code_exec", language="python", code=code)
    assert done["ok"] and done["stdout"].split() == ["agg", "6", "0.5", "3"], done
    clis = ("import shutil, subprocess\n"
            "print(all(shutil.which(c) for c in ('jq', 'git', 'pdftotext', 'sqlite3')))\n"
            "print(subprocess.run(['jq', '.a'], input=b'{\"a\": 1}',"
            " capture_output=True).stdout.decode().strip())")
    tools = run(server, user, session, "code_exec", language="python", code=clis)
    assert tools["ok"] and tools["stdout"] == "True\n1\n", tools


def test_a_csv_becomes_a_png_through_the_api(server: Server, user: str) -> None:
    session = new_session(server, user)
    with server.client(user) as client:
        assert client.put(f"/v1/sessions/{session}/files/data.csv", content=CSV,
                          headers={"Content-Type": "application/octet-stream"}).status_code == 201
    done = run(server, user, session, "code_exec", language="python", code=PLOT)
    assert done["ok"] and done["stdout"] == "rows 5 backend agg\n", done
    with server.client(user) as client:
        png = client.get(f"/v1/sessions/{session}/files/plot.png")
    assert png.status_code == 200
    assert png_size(png.content) == (512, 384)  # matplotlib's 6.4 x 4.8 in at 80 dpi


def test_the_agent_plots_a_csv(server: Server, user: str, ollama: FakeOllama) -> None:
    ollama.model.add(Reply(calls=[Call("code_exec", {"language": "python", "code": PLOT})]),
                     Reply(content="Saved the chart as plot.png."))
    session = new_session(server, user)
    with server.client(user) as client:
        client.put(f"/v1/sessions/{session}/files/data.csv", content=CSV,
                   headers={"Content-Type": "application/octet-stream"})
    send(server, user, session, "plot data.csv")
    events = watch(server, user, session)
    result = next(e for e in events if e["type"] == "tool_result")
    assert result["success"] is True and "rows 5" in result["output"], result
    assert events[-1]["type"] == "stream_end"
    assert events[-1]["content"] == "Saved the chart as plot.png."
    with server.client(user) as client:
        assert png_size(client.get(f"/v1/sessions/{session}/files/plot.png").content)
