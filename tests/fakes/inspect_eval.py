"""A tiny inspect_ai eval whose sample works in a Navi sandbox (the example README shows):

    NAVI_URL=http://127.0.0.1:8000 NAVI_TOKEN=navi_… \\
        inspect eval tests/fakes/inspect_eval.py --model mockllm/model --sandbox navi

The solver writes a file into the sample's sandbox, runs Python on it there and answers
with what it printed; `match()` scores it against 42. No real model is needed (mockllm).
"""

from inspect_ai import Task, task
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput
from inspect_ai.scorer import match
from inspect_ai.solver import Generate, TaskState, solver
from inspect_ai.util import sandbox

PROGRAM = "a, b = open('data/in.txt').read().split(); print(int(a) * int(b))"


@solver
def multiply_in_the_sandbox():  # type: ignore[no-untyped-def]
    async def solve(state: TaskState, generate: Generate) -> TaskState:
        box = sandbox()
        await box.write_file("data/in.txt", "6 7\n")
        result = await box.exec(["python3", "-c", PROGRAM])
        answer = result.stdout.strip() if result.success else f"failed: {result.stderr}"
        state.output = ModelOutput.from_content("mockllm/model", answer)
        state.completed = True
        return state

    return solve


@task
def navi_multiply() -> Task:
    return Task(dataset=[Sample(input="multiply 6 by 7", target="42")],
                solver=multiply_in_the_sandbox(), scorer=match(), sandbox="navi")
