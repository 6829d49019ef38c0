"""Locust users for teams that prefer Locust: the same HTTP API, scenarios and query selection as
`cxg loadtest` (closed model: each user waits for its answer before the next query).

    pip install -e ".[locust]"
    CXG_SCENARIO=loadtests/scenarios/tpch14.toml locust -f loadtests/locustfile.py \\
        --host http://127.0.0.1:8080 --users 50 --spawn-rate 50 --headless

CXG_SCENARIO names a scenario file (default: the built-in tpch14 list, random); CXG_TOKEN a
bearer token. Locust's statistics are per query tag; 429/503 answers count as failures named
"rejected", other errors by their code.
"""

from __future__ import annotations

import itertools
import os
import time

import gevent
from locust import HttpUser, constant, events, task
from locust.exception import StopUser

from loadtests.scenario import BUILT_IN, Scenario, load_scenario

SCENARIO = (
    load_scenario(os.environ["CXG_SCENARIO"])
    if os.environ.get("CXG_SCENARIO")
    else Scenario(BUILT_IN["tpch14"](), "random", total=int(os.environ.get("CXG_TOTAL", "1000")))
)
PICKER = SCENARIO.picker()
NUMBERS = itertools.count(1)
USERS = itertools.count(0)
STARTED = time.monotonic()
ACTIVE = 0  # users running
FINISHED = False  # the scenario has ended (a Stop step, or the FromList list ran out)


@events.test_start.add_listener
def _start(**kwargs) -> None:
    global STARTED
    STARTED = time.monotonic()


class GatewayUser(HttpUser):
    wait_time = constant(0)

    def on_start(self) -> None:
        global ACTIVE
        ACTIVE += 1
        self.number = next(USERS)
        token = os.environ.get("CXG_TOKEN")
        self.headers = {"Accept": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}

    def on_stop(self) -> None:
        """The run ends, as `cxg loadtest`'s does, once the scenario is over and every user is done."""
        global ACTIVE
        ACTIVE -= 1
        if FINISHED and ACTIVE == 0 and self.environment.runner is not None:
            gevent.spawn(self.environment.runner.quit)

    @task
    def query(self) -> None:
        global FINISHED
        action = SCENARIO.action_at(time.monotonic() - STARTED)
        if action == "sleep":
            time.sleep(0.1)
            return
        index = None if action == "stop" else PICKER.pick(next(NUMBERS), self.number)
        if index is None:
            FINISHED = True
            raise StopUser()
        chosen = SCENARIO.queries[index]
        body = {"sql": chosen.sql, "tag": chosen.tag, "client": self.number % 1_000_000, "wait": 300}
        if chosen.params:
            body["params"] = chosen.params
        with self.client.post(
            "/v1/statements", json=body, headers=self.headers, name=chosen.tag, catch_response=True
        ) as response:
            if response.status_code != 202:
                return _judge(response)
            response.success()  # still running: the answer comes from polling
            url = f"/v1/statements/{response.json()['id']}?wait=300"
        while True:
            with self.client.get(url, headers=self.headers, name=f"{chosen.tag} (poll)", catch_response=True) as poll:
                if poll.status_code != 202:
                    return _judge(poll)
                poll.success()


def _judge(response) -> None:
    if response.status_code in (429, 503):
        response.failure("rejected")
    elif response.status_code != 200:
        try:
            code = response.json()["error"]["code"]
        except (ValueError, KeyError, TypeError):
            code = f"HTTP {response.status_code}"
        response.failure(code)
    else:
        response.success()
